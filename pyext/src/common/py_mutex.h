#ifndef MT_PYEXT_SRC_COMMON_PY_MUTEX_H_
#define MT_PYEXT_SRC_COMMON_PY_MUTEX_H_

#include <Python.h>

namespace mt::pyext {

// The one scoped lock of the extension's PyMutexes.
//
// PyMutex rather than std::mutex: a contended PyMutex waits detached from
// the interpreter, so a stop-the-world pause never waits on a thread that
// waits on it. Nothing under one allocates Python objects or drops
// references (either may run a collection), unless the owner says why it
// is safe (the queues' Python storage hooks).
//
// kReentrant: a nested guard on a mutex this thread already holds through
// a reentrant guard does not lock again. A queue with Python storage hooks
// (a subclass's _put/_get, PriorityQueue's item comparisons) runs Python
// code under its mutex, and that code may call the queue again (qsize() in
// an __lt__), as it may on asyncio's one-thread queue; PyMutex is not
// recursive. The held mutexes are tracked per thread, which costs a
// thread-local lookup, so only the primitives that can re-enter ask for it.
class PyMutexGuard {
 public:
  enum Reentry { kNotReentrant, kReentrant };

  explicit PyMutexGuard(PyMutex& mu, Reentry reentry = kNotReentrant)
      : mu_(&mu), tracked_(reentry == kReentrant) {
    if (tracked_) {
      const int depth = held_count_ < kMaxHeld ? held_count_ : kMaxHeld;
      for (int i = 0; i < depth; ++i) {
        if (held_[i] == mu_) {
          mu_ = nullptr;  // Re-entered: held further up this thread's stack.
          return;
        }
      }
    }
    PyMutex_Lock(mu_);
    if (tracked_) {
      if (held_count_ < kMaxHeld) held_[held_count_] = mu_;
      ++held_count_;
    }
  }
  ~PyMutexGuard() {
    if (mu_ == nullptr) return;
    if (tracked_) --held_count_;
    PyMutex_Unlock(mu_);
  }
  PyMutexGuard(const PyMutexGuard&) = delete;
  PyMutexGuard& operator=(const PyMutexGuard&) = delete;

 private:
  // Reentrant guards nest in strict LIFO order; deeper than this they are
  // only counted.
  static constexpr int kMaxHeld = 8;
  static inline thread_local PyMutex* held_[kMaxHeld] = {};
  static inline thread_local int held_count_ = 0;

  PyMutex* mu_;
  bool tracked_;
};

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_PY_MUTEX_H_
