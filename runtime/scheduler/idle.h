#ifndef MT_RUNTIME_SCHEDULER_IDLE_H_
#define MT_RUNTIME_SCHEDULER_IDLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace mt::runtime::scheduler {

// Who is searching for work and who is parked.
//
// One atomic word counts searching workers (low half) and unparked workers
// (high half) so a producer decides with a single load whether to wake
// anyone: nobody is woken while a searcher exists (it will find the work),
// and at most one sleeper is woken per push. The list of sleepers is under a
// mutex because it changes only when a thread is about to sleep or wake,
// which costs a syscall anyway.
class Idle {
 public:
  explicit Idle(std::size_t num_workers);

  // Producers. Returns the sleeper to unpark (already removed from the list
  // and counted as unparked and searching), or nullopt. `unthrottled`
  // (reactor wakeups) ignores existing searchers. `exclude` is a worker
  // that must not be picked (the reactor-driving worker itself).
  std::optional<std::size_t> WorkerToNotify(
      bool unthrottled, std::optional<std::size_t> exclude = std::nullopt);

  // A worker out of local work. At most half the workers search at once so
  // a burst of wakes does not turn into a stampede of stealers.
  bool TransitionWorkerToSearching();
  // Returns true when the caller was the last searcher: it must then wake
  // another worker if work remains, or that work could sit unseen.
  bool TransitionWorkerFromSearching();
  // Before sleeping. Returns true when the caller was the last searcher.
  bool TransitionWorkerToParked(std::size_t worker, bool is_searching);
  // A parked worker woke with work of its own (the reactor gave it some).
  // Returns true if it was still listed; false if a producer already took
  // it off the list (and counted it as searching).
  bool UnparkWorkerById(std::size_t worker);
  bool IsParked(std::size_t worker);

  // Live resize: a new worker starts unparked; a retiring one leaves
  // unparked and not searching.
  void AddWorker();
  void RemoveWorker();

  std::size_t num_searching() const;
  std::size_t num_unparked() const;
  std::size_t num_workers() const {
    return num_workers_.load(std::memory_order_acquire);
  }

 private:
  static constexpr std::uint64_t kUnparkedOne = std::uint64_t{1} << 32;
  static constexpr std::uint64_t kSearchingMask = kUnparkedOne - 1;
  bool NotifyShouldWakeup(bool unthrottled) const;

  std::atomic<std::uint64_t> state_;
  std::atomic<std::size_t> num_workers_;
  std::mutex mu_;
  std::vector<std::size_t> sleepers_;  // Guarded by mu_.
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_IDLE_H_
