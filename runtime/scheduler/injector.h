#ifndef MT_RUNTIME_SCHEDULER_INJECTOR_H_
#define MT_RUNTIME_SCHEDULER_INJECTOR_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "runtime/scheduler/unit.h"

namespace mt::runtime::scheduler {

// The global FIFO queue through which work enters the pool from outside the
// workers. Multi-producer, multi-consumer; guarded by one mutex because it
// is off the per-worker fast path (workers will prefer their local queues).
// std::mutex rather than absl::Mutex: Debian's Abseil is not built with the
// sanitizers, and TSan must see every lock the scheduler takes.
class Injector {
 public:
  // Returns false (and drops nothing: the unit is handed back) once closed.
  bool Push(Unit& unit);
  std::optional<Unit> TryPop();
  // Pops, blocking until a unit arrives or the injector is closed and empty.
  // `before_wait`/`after_wait` run around each actual wait so callers can
  // detach from and reattach to whatever they hold (the interpreter).
  template <typename Before, typename After>
  std::optional<Unit> PopOrWait(Before&& before_wait, After&& after_wait);

  // After Close, Push fails; units already queued can still be popped.
  void Close();
  bool closed() const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Unit> queue_;  // Guarded by mu_.
  bool closed_ = false;     // Guarded by mu_.
};

template <typename Before, typename After>
std::optional<Unit> Injector::PopOrWait(Before&& before_wait,
                                        After&& after_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  while (queue_.empty() && !closed_) {
    // Detach hooks must not run under our lock (they may block on the
    // interpreter), so release it around them.
    lock.unlock();
    before_wait();
    lock.lock();
    ready_.wait(lock, [this] { return !queue_.empty() || closed_; });
    lock.unlock();
    after_wait();
    lock.lock();
  }
  if (queue_.empty()) return std::nullopt;
  Unit unit = std::move(queue_.front());
  queue_.pop_front();
  return unit;
}

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_INJECTOR_H_
