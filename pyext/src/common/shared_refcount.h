#ifndef MT_PYEXT_SRC_COMMON_SHARED_REFCOUNT_H_
#define MT_PYEXT_SRC_COMMON_SHARED_REFCOUNT_H_

#include <Python.h>

#include <atomic>
#include <cstdint>

namespace mt::pyext {

// Whether more than one worker runs (RuntimeHolder keeps it current). On
// one worker an object is released where it was made, and sharing would
// only make its references atomic.
inline std::atomic<bool> share_refcounts{true};

// Hands an object this thread made over to shared reference counting, for
// an object that will likely be released on another worker.
//
// Free-threaded CPython counts an object's references on the thread that
// made it (biased reference counting): that thread's increfs and decrefs
// are plain, everybody else's go to a shared field, and a release from
// another thread that takes the shared count below zero queues the object
// to its owner (a mutex per owner, and a wake of its eval loop), which
// merges the counts at its next check. A wait on a primitive makes three
// objects (the awaiter, its waiter future, the future's iterator) on the
// worker where the task stepped; its wake usually runs the task on the
// waker's worker, which drops them there. With two workers most waits
// queued all three, and the owners' merges contended on their mutexes.
// Merged, every reference is an atomic operation on the shared field and
// the last release frees the object where it happens.
//
// Only the owner may merge (it alone writes the local count), so an
// object owned by another thread, unowned or immortal is left alone.
inline void ShareRefcount(PyObject* op) {
#ifdef Py_GIL_DISABLED
  if (!share_refcounts.load(std::memory_order_relaxed)) return;
  if (op->ob_tid != _Py_ThreadId() || _Py_IsImmortal(op)) return;
  const Py_ssize_t local = static_cast<Py_ssize_t>(op->ob_ref_local);
  // The order of CPython's own explicit merge: the local count and the
  // owner go before the shared field takes the sum.
  __atomic_store_n(&op->ob_ref_local, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&op->ob_tid, 0, __ATOMIC_RELAXED);
  Py_ssize_t shared = __atomic_load_n(&op->ob_ref_shared, __ATOMIC_RELAXED);
  Py_ssize_t merged;
  do {
    const Py_ssize_t count = (shared >> _Py_REF_SHARED_SHIFT) + local;
    merged = _Py_REF_SHARED(count, _Py_REF_MERGED);
  } while (!__atomic_compare_exchange_n(&op->ob_ref_shared, &shared, merged,
                                        /*weak=*/false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
#else
  (void)op;
#endif
}

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_SHARED_REFCOUNT_H_
