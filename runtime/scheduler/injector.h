#ifndef MT_RUNTIME_SCHEDULER_INJECTOR_H_
#define MT_RUNTIME_SCHEDULER_INJECTOR_H_

#include <cstddef>
#include <deque>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "runtime/scheduler/unit.h"

namespace mt::runtime::scheduler {

// The global FIFO queue through which work enters the pool from outside the
// workers. Multi-producer, multi-consumer; guarded by one mutex because it
// is off the per-worker fast path (workers will prefer their local queues).
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
  mutable absl::Mutex mu_;
  std::deque<Unit> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

template <typename Before, typename After>
std::optional<Unit> Injector::PopOrWait(Before&& before_wait,
                                        After&& after_wait) {
  absl::MutexLock lock(&mu_);
  while (queue_.empty() && !closed_) {
    // Detach hooks must not run under our lock (they may block on the
    // interpreter), so release it around them.
    mu_.Unlock();
    before_wait();
    mu_.Lock();
    mu_.Await(absl::Condition(
        +[](Injector* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->queue_.empty() || self->closed_;
        },
        this));
    mu_.Unlock();
    after_wait();
    mu_.Lock();
  }
  if (queue_.empty()) return std::nullopt;
  Unit unit = std::move(queue_.front());
  queue_.pop_front();
  return unit;
}

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_INJECTOR_H_
