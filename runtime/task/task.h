#ifndef MT_RUNTIME_TASK_TASK_H_
#define MT_RUNTIME_TASK_TASK_H_

#include <atomic>
#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "runtime/metrics/cycle_clock.h"
#include "runtime/task/state.h"

namespace mt::runtime::task {

class Task;

// Why a unit is being queued; the scheduler picks the queue and whether to
// wake a parked worker from it.
enum class ScheduleKind {
  kSpawn,  // New work.
  kWake,   // Woken by another unit or thread: LIFO slot when on a worker.
  kYield,  // Woken during its own run: back of the queue, for fairness.
  kIo,     // Woken by the reactor: unthrottled wakeup of a parked worker.
  // Woken for work foreign to what the calling worker runs (another
  // loop's): the injector and a parked worker, never the caller's own
  // queue or LIFO slot, since the caller may block until that work is
  // done (run_coroutine_threadsafe(...).result() on another loop).
  kRemote,
};

// Where a task goes when it is woken. Implemented by the scheduler; tests
// implement it with a plain queue.
class Executor {
 public:
  virtual ~Executor() = default;
  // Takes over one reference to `task`, which is in the kScheduled state.
  virtual void Schedule(Task* task, ScheduleKind kind) = 0;
  // A task created through the executor's spawn (tracked) completed; lets
  // it count work in flight. Called before the runner's reference drops.
  virtual void OnComplete(Task* task) {}
  // A unit keeps the executor it is bound to alive: set_executor() calls
  // Retain(), and if that returned true, the unit's rebinding or
  // destruction calls Release(). The scheduler returns false (it outlives
  // the units that run on it, though not every unit: a leftover may be
  // freed after the runtime is gone, so it must not be called then); a
  // Strand is reference counted.
  virtual bool Retain() { return false; }
  virtual void Release() {}
  // The id of the unit this executor was made for (Task::id()), or 0: the
  // embedder's strand made to be one unit's own (scheduler::Strand).
  virtual std::uint64_t made_for() const { return 0; }
  // A wake of `task` (bound here) found it queued, running or done
  // already, so nothing was queued: a strand orders what the waker does
  // next behind the run already queued (scheduler::Strand).
  virtual void OnWakeWithoutQueueing(Task* task, ScheduleKind kind) {}
  // Whether units run in rounds, as asyncio's one thread runs its ready
  // queue: what a unit schedules runs after what was ready before it (a
  // lone worker in FIFO mode). A strand then runs per poll only the units
  // queued on it before the poll began, or before a wake its units made
  // of a unit elsewhere (scheduler::Strand::Poll, Strand::NoteWake).
  virtual bool KeepsRounds() const { return false; }
};

// A schedulable unit: intrusive, reference counted through its State word,
// polled by at most one thread at a time. Subclasses implement Poll (one
// step) and optionally OnCancel (release without running).
class Task {
 public:
  // `scheduled` creates the task in the kScheduled state with one reference
  // owned by the queue it is about to enter; otherwise the creator holds the
  // one reference and the task is idle.
  explicit Task(bool scheduled);
  virtual ~Task();

  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // One step. Returns true when the task has finished for good.
  virtual bool Poll() = 0;
  // Called instead of (or after) Poll once cancellation was requested.
  virtual void OnCancel() {}

  State& state() { return state_; }
  std::uint64_t id() const { return id_; }
  // When the wake that queued the unit last was given (CycleClock
  // cycles; its creation for one made scheduled): a unit's Poll measures
  // its scheduling delay from it. A wake while the unit runs counts from
  // the end of that run, where it is queued again.
  std::uint64_t queued_cycles() const { return queued_cycles_.load(std::memory_order_relaxed); }
  void MarkQueued() {
    queued_cycles_.store(metrics::CycleClock::Now(), std::memory_order_relaxed);
  }
  Executor* executor() const { return executor_.load(std::memory_order_acquire); }
  // Binds the unit to `executor` (retained). Only while nobody else can
  // wake the unit: before its first wake, or from its own Poll() (a wake
  // racing the step is remembered and queued through the new executor when
  // the step ends).
  void set_executor(Executor* executor) {
    if (executor == executor_.load(std::memory_order_relaxed)) return;
    const bool release_previous = executor_retained_;
    executor_retained_ = executor != nullptr && executor->Retain();
    Executor* previous = executor_.exchange(executor, std::memory_order_acq_rel);
    if (release_previous) previous->Release();
  }
  // Set by the executor's spawn before the task is published.
  bool tracked() const { return tracked_; }
  void set_tracked() { tracked_ = true; }
  // The group of work the unit belongs to (the Python layer: its loop), or
  // 0 for none. A stand-in worker, which runs queued work while every
  // worker is held by one unit, leaves alone the units of a group whose
  // unit holds a worker: they keep waiting, in order, as they would for a
  // lone worker. Set once, before the unit is first woken.
  std::uintptr_t domain() const { return domain_; }
  void set_domain(std::uintptr_t domain) { domain_ = domain; }

  // Wakes the task from any thread; at most one wake queues it and a wake
  // during a run is remembered.
  void Wake(ScheduleKind kind = ScheduleKind::kWake);
  // Requests cancellation from any thread (see State::Cancel).
  void Cancel();

  void Ref() { state_.RefInc(); }
  void Unref() {
    if (state_.RefDec()) delete this;
  }

 private:
  State state_;
  const std::uint64_t id_;
  std::atomic<Executor*> executor_{nullptr};
  std::atomic<std::uint64_t> queued_cycles_{0};
  bool executor_retained_ = false;  // Whether executor_ needs Release().
  bool tracked_ = false;
  std::uintptr_t domain_ = 0;
};

// What a runner does after popping a task (holding the queue's reference):
// run it once through its state machine, then drop, requeue (kYield) or
// complete it.
void RunTask(Task* task);

// A one-shot unit around a closure: runs it once, or drops it unrun when
// cancelled. Created scheduled.
class FnTask final : public Task {
 public:
  explicit FnTask(absl::AnyInvocable<void() &&> fn)
      : Task(/*scheduled=*/true), fn_(std::move(fn)) {}
  bool Poll() override;
  void OnCancel() override;

  // Spawning a closure is the hottest allocation in the runtime: blocks
  // are recycled through a small per-thread free list (see task.cc).
  static void* operator new(std::size_t size);
  static void operator delete(void* p, std::size_t size);

 private:
  absl::AnyInvocable<void() &&> fn_;
};

}  // namespace mt::runtime::task

#endif  // MT_RUNTIME_TASK_TASK_H_
