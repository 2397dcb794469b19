#ifndef MT_PYEXT_SRC_SYNC_REGISTER_H_
#define MT_PYEXT_SRC_SYNC_REGISTER_H_

#include <Python.h>

namespace mt::pyext {

// Adds the sync package to _core: Lock, Event, Semaphore, Condition,
// Barrier, Queue and their waiters.
// 0, or -1 with an error set.
int RegisterSyncPackage(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_REGISTER_H_
