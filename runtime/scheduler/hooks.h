#ifndef MT_RUNTIME_SCHEDULER_HOOKS_H_
#define MT_RUNTIME_SCHEDULER_HOOKS_H_

#include <cstddef>
#include <functional>

namespace mt::runtime::scheduler {

// Callbacks run on each worker thread. The Python layer uses them to attach
// a worker to the interpreter for its lifetime and to detach around every
// blocking point (parking on a condition variable or in epoll_wait). Every
// hook is optional; `worker_index` is stable for the worker's life (a slot
// can be reused by a later worker after its previous owner retired).
struct WorkerHooks {
  std::function<void(std::size_t worker_index)> on_start;
  std::function<void(std::size_t worker_index)> on_stop;
  std::function<void(std::size_t worker_index)> before_park;
  std::function<void(std::size_t worker_index)> after_unpark;
  // Run when the worker has found nothing to run, before it parks, while
  // it is still counted unparked: true if the hook did something that may
  // have queued work (the worker then looks again instead of parking),
  // false to park. It must return false once it has nothing left to do.
  // Also run by a parked worker that RerunParkHooks() wakes, between its
  // after_unpark and before_park (its result ignored: the worker then
  // looks at its queue anyway). The Python layer frees there what other
  // threads handed this thread to free (free-threaded CPython's queued
  // refcount merges), which a parked thread would otherwise keep until it
  // next runs Python code.
  std::function<bool(std::size_t worker_index)> before_idle;
};

// Runs `hook` if it is set (the worker loop and the stand-in worker).
inline void RunHook(const std::function<void(std::size_t)>& hook, std::size_t i) {
  if (hook) hook(i);
}

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_HOOKS_H_
