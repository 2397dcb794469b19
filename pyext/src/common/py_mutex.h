#ifndef MT_PYEXT_SRC_COMMON_PY_MUTEX_H_
#define MT_PYEXT_SRC_COMMON_PY_MUTEX_H_

#include <Python.h>

#include <cstdint>

namespace mt::pyext {

// Locks `mu` as PyMutex_Lock does, after a short wait of its own.
//
// A contended PyMutex_Lock (CPython 3.13, 3.14) calls sched_yield 40 times
// before it parks, and does not look at the lock between those calls: a
// waiter pays 40 system calls even when the holder lets go within a
// microsecond. The extension's critical sections are that short (no Python
// runs under them), so a waiter first watches the lock with the CPU's
// pause hint and takes it as soon as it is free. A holder that keeps it
// longer (descheduled, or stopped with the world) sends the waiter on to
// PyMutex_Lock, which parks detached from the interpreter: the spin is
// bounded, so it never holds up a stop-the-world pause for long. A lock
// with parked waiters is not spun on: they were there first.
inline void LockPyMutex(PyMutex* mu) {
#ifdef Py_GIL_DISABLED
  static_assert(_Py_LOCKED == 1, "PyMutex's layout changed");
  constexpr std::uint8_t kHasParked = 2;  // CPython's _Py_HAS_PARKED.
  // About 2-10 us, depending on the CPU's pause latency.
  constexpr int kSpins = 128;
  for (int i = 0; i < kSpins; ++i) {
    std::uint8_t v = __atomic_load_n(&mu->_bits, __ATOMIC_RELAXED);
    if ((v & _Py_LOCKED) == 0) {
      if (__atomic_compare_exchange_n(&mu->_bits, &v, v | _Py_LOCKED, /*weak=*/false,
                                      __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return;
      }
      continue;
    }
    if ((v & kHasParked) != 0) break;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  }
#endif
  PyMutex_Lock(mu);
}

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
    LockPyMutex(mu_);
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
