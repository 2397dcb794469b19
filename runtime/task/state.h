#ifndef MT_RUNTIME_TASK_STATE_H_
#define MT_RUNTIME_TASK_STATE_H_

#include <atomic>
#include <cstdint>

namespace mt::runtime::task {

// The whole lifecycle of a schedulable unit in one atomic word: five flag
// bits and a reference count above them. Keeping it in one word is what lets
// a wake, a run and a cancel race without a lock and still agree on who
// queues the unit, who runs it and who frees it.
//
//   kScheduled  the unit sits in a queue (or is being handed to one); the
//               queue owns one reference.
//   kRunning    a worker is inside Poll(); nobody else may poll it.
//   kNotified   a wake arrived while running; the runner requeues it after
//               Poll returns instead of dropping it.
//   kComplete   terminal: never scheduled or run again.
//   kCancelled  sticky request; the next runner takes the cancel path.
//   kInspected  a reader outside the scheduler is looking at what Poll()
//               works on while nobody runs it (a Python task's coroutine
//               frames, which CPython lets no second thread read while
//               they execute); a runner waits for it to end.
class State {
 public:
  static constexpr std::uint64_t kScheduled = 1u << 0;
  static constexpr std::uint64_t kRunning = 1u << 1;
  static constexpr std::uint64_t kNotified = 1u << 2;
  static constexpr std::uint64_t kComplete = 1u << 3;
  static constexpr std::uint64_t kCancelled = 1u << 4;
  static constexpr std::uint64_t kInspected = 1u << 5;
  static constexpr int kRefShift = 8;
  static constexpr std::uint64_t kRefOne = std::uint64_t{1} << kRefShift;
  static constexpr std::uint64_t kFlagMask = kRefOne - 1;

  // A new unit with one reference held by its creator, not scheduled.
  State() : word_(kRefOne) {}
  // A new unit that is already scheduled; its single reference belongs to
  // the queue it is about to enter.
  static constexpr std::uint64_t kNewScheduled = kRefOne | kScheduled;
  explicit State(std::uint64_t initial) : word_(initial) {}

  enum class WakeAction {
    kNone,    // Already queued, complete, or running (then remembered).
    kSubmit,  // Caller must queue the unit; a reference was added for it.
  };
  // A wake from any thread.
  WakeAction TransitionToScheduled();

  enum class RunAction {
    kPoll,    // Caller now runs Poll().
    kCancel,  // Cancel requested: caller runs the cancel path.
  };
  // By the worker that took the unit off a queue (holding the queue's
  // reference). Requires kScheduled; never sees kComplete because a
  // completed unit is never scheduled. Waits out an inspection.
  RunAction TransitionToRunning();

  // For a reader that must see what Poll() works on while it is not
  // running: sets kInspected unless the unit is running, complete or
  // inspected already, and returns whether it did. Wakes and cancels
  // still land meanwhile (a queued unit just does not start), so the
  // reader must call EndInspection() soon, without blocking in between.
  bool TryBeginInspection();
  void EndInspection();
  // What a runner calls, repeatedly, while it waits out an inspection
  // (default: yield the CPU). An embedder whose threads must not block in
  // some state while waiting (Python's, attached to the interpreter)
  // installs its own, once, before any unit runs.
  static void SetInspectionWait(void (*wait)());

  enum class IdleAction {
    kIdle,        // Parked until the next wake; drop the runner's reference.
    kReschedule,  // Woken during the run: requeue with the same reference.
    kCancel,      // Cancel arrived during the run: take the cancel path.
  };
  // After Poll() returned "not finished".
  IdleAction TransitionToIdle();

  // After Poll() finished or the cancel path ran. Terminal.
  void TransitionToComplete();
  // TransitionToComplete and RefDec in one atomic step (the runner's usual
  // last act). Returns true when that was the last reference.
  bool TransitionToCompleteAndRelease();

  // Requests cancellation from any thread. Returns kSubmit when the unit was
  // idle: the caller must queue it (a reference was added) so a worker runs
  // the cancel path. Returns kNone when it is already queued or running (the
  // runner sees the flag) or complete.
  WakeAction Cancel();

  void RefInc();
  // Returns true when the caller dropped the last reference.
  bool RefDec();

  std::uint64_t Load() const { return word_.load(std::memory_order_acquire); }
  static std::uint64_t RefCount(std::uint64_t word) { return word >> kRefShift; }

 private:
  std::atomic<std::uint64_t> word_;
};

}  // namespace mt::runtime::task

#endif  // MT_RUNTIME_TASK_STATE_H_
