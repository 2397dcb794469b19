#ifndef MT_PYEXT_SRC_PY_REF_H_
#define MT_PYEXT_SRC_PY_REF_H_

#include <Python.h>

namespace mt::pyext {

// Drops a reference from any thread. Runtime units are freed wherever
// their last reference goes: usually a worker (attached to the
// interpreter), but also a thread that cancels leftovers during shutdown
// with its thread state released, or the supervisor thread, which is never
// attached. Those attach first. During finalization the reference is
// leaked rather than touching a dying interpreter.
inline void DecRefAnyThread(PyObject* obj) {
  if (obj == nullptr) return;
  if (PyThreadState_GetUnchecked() != nullptr) {
    Py_DECREF(obj);
    return;
  }
  if (!Py_IsInitialized() || Py_IsFinalizing()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(obj);
  PyGILState_Release(state);
}

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_PY_REF_H_
