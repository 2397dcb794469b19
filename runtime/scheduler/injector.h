#ifndef MT_RUNTIME_SCHEDULER_INJECTOR_H_
#define MT_RUNTIME_SCHEDULER_INJECTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "runtime/task/task.h"

namespace mt::runtime::scheduler {

// The global MPMC queue: work from outside the workers, overflow from full
// local queues, and everything a retiring worker hands back. FIFO.
//
// Pointers live in a std::deque (blocks of contiguous slots) rather than a
// list threaded through the tasks: moving a batch copies pointers and never
// touches the tasks themselves, which are usually cold in this core's cache.
//
// A std::mutex (not absl::Mutex) so ThreadSanitizer sees every lock: Debian's
// Abseil is not built with the sanitizers. The length is mirrored in an
// atomic so "is there global work?" never takes the lock.
class Injector {
 public:
  Injector() = default;
  Injector(const Injector&) = delete;
  Injector& operator=(const Injector&) = delete;

  void Push(task::Task* task);
  void PushBatch(const std::vector<task::Task*>& tasks);
  task::Task* Pop();
  // Pops up to `max` tasks into `out` (appended, FIFO order).
  std::size_t PopBatch(std::size_t max, std::vector<task::Task*>& out);
  // Pops the first of the oldest `scan_limit` tasks whose domain is none
  // of `held` (a task of domain 0 always qualifies); the tasks it passes
  // over keep their places. For a stand-in worker: O(scan_limit).
  task::Task* PopOutside(const std::vector<std::uintptr_t>& held,
                         std::size_t scan_limit);
  // Puts `tasks` ahead of everything queued, in their order: what a
  // stand-in worker took but did not run goes back where it was first.
  void PushFront(const std::vector<task::Task*>& tasks);

  std::size_t Len() const { return len_.load(std::memory_order_acquire); }
  bool IsEmpty() const { return Len() == 0; }

 private:
  std::mutex mu_;
  std::deque<task::Task*> queue_;  // Guarded by mu_.
  std::atomic<std::size_t> len_{0};
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_INJECTOR_H_
