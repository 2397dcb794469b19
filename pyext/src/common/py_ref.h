#ifndef MT_PYEXT_SRC_COMMON_PY_REF_H_
#define MT_PYEXT_SRC_COMMON_PY_REF_H_

#include <Python.h>

#include <type_traits>

namespace mt::pyext {

#ifdef Py_GIL_DISABLED
// NewSharedRef/DropSharedRef below add to the shared half of a
// free-threaded object's reference count. CPython has no public call for
// that (3.13, 3.14), so they use the layout it documents in
// Include/object.h and refcount.h: `ob_ref_shared`, a Py_ssize_t holding
// the count shifted left by _Py_REF_SHARED_SHIFT (the low bits are merge
// flags), and _Py_DecRefShared to drop one. Checked here, so an
// interpreter laid out differently fails the build, not the process.
static_assert(std::is_same_v<decltype(PyObject::ob_ref_shared), Py_ssize_t>,
              "free-threaded PyObject::ob_ref_shared is no longer a Py_ssize_t");
static_assert(_Py_REF_SHARED_SHIFT == 2,
              "free-threaded reference-count flags changed width");
static_assert(PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030F0000,
              "py_ref.h: shared-count references are verified for CPython 3.13 "
              "and 3.14 only; check the layout in Include/object.h first");
#endif

// Runs drop(obj) with an attached thread state, from any thread. Runtime
// units are freed wherever their last reference goes: usually a worker
// (attached to the interpreter), but also a thread that cancels leftovers
// during shutdown with its thread state released, or the supervisor thread,
// which is never attached. Those attach first. During finalization the
// reference is leaked rather than touching a dying interpreter.
template <typename Drop>
void DropOnAnyThread(PyObject* obj, Drop drop) {
  if (obj == nullptr) return;
  if (PyThreadState_GetUnchecked() != nullptr) {
    drop(obj);
    return;
  }
  if (!Py_IsInitialized() || Py_IsFinalizing()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  drop(obj);
  PyGILState_Release(state);
}

// Drops a reference from any thread (see DropOnAnyThread).
inline void DecRefAnyThread(PyObject* obj) {
  DropOnAnyThread(obj, [](PyObject* o) { Py_DECREF(o); });
}

// A reference counted in the object's shared count even on the thread that
// owns it, for one that is usually dropped on another worker (a step unit's
// hold on its task). Taken the usual way it would sit in the owner's local
// count, and the other worker's decrement would push the shared count below
// zero, which in free-threaded CPython queues the object back to its owner
// to merge the two counts (biased reference counting): with many children
// made on one worker and finished on another, that merging kept the making
// worker busy (one_million at 2 workers). CPython acts on the sum of both
// counts, so lifetimes are unchanged; an owned object keeps a local count
// >= 1, so the owner's own decrements stay valid. Drop it with
// DropSharedRef, which takes it from the shared count on any thread (a
// plain Py_DECREF on the owner would empty the local count early and force
// a merge there instead). GIL builds: ordinary references.
inline PyObject* NewSharedRef(PyObject* obj) {
#ifdef Py_GIL_DISABLED
  if (!_Py_IsImmortal(obj)) {
    _Py_atomic_add_ssize(&obj->ob_ref_shared,
                         static_cast<Py_ssize_t>(1) << _Py_REF_SHARED_SHIFT);
    return obj;
  }
#endif
  return Py_NewRef(obj);
}

// Drops a reference taken by NewSharedRef (nullptr is ignored). Needs an
// attached thread state, as Py_DECREF does.
inline void DropSharedRef(PyObject* obj) {
  if (obj == nullptr) return;
#ifdef Py_GIL_DISABLED
  if (!_Py_IsImmortal(obj)) {
    _Py_DecRefShared(obj);
    return;
  }
#endif
  Py_DECREF(obj);
}

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_PY_REF_H_
