#ifndef MT_PYEXT_SRC_FUTURE_H_
#define MT_PYEXT_SRC_FUTURE_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio's Future: asyncio.Future's API and semantics on the raw C API,
// safe to use from several threads at once.
//
// State (result, exception, callbacks) is guarded by the object's critical
// section (a per-object lock on free-threaded builds, the GIL otherwise);
// nothing that can run Python code (a call, a decref that may finalize) is
// done while it is held. Done callbacks are handed to the loop in one batch,
// in registration order, each with the context it was registered with.
struct FutureObject;

// Adds mt_asyncio._core.Future (and its await iterator) to `module`.
// Returns 0, or -1 with an exception set.
int RegisterFutureType(PyObject* module);

// The type object, for subclass checks; valid after RegisterFutureType.
PyTypeObject* FutureType();

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_FUTURE_H_
