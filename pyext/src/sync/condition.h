#ifndef MT_PYEXT_SRC_SYNC_CONDITION_H_
#define MT_PYEXT_SRC_SYNC_CONDITION_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core.Condition: asyncio.Condition's wait/notify for tasks on
// several workers. mt_asyncio.locks.Condition derives from it and adds the
// lock's acquire/release/locked, `async with` and wait_for().
//
// Waiter futures are queued under the condition's PyMutex *before* the
// lock is released, so a notify from another worker the moment the lock
// is free finds them. wait() returns an awaiter that releases the lock,
// waits, and takes the lock again even when cancelled (asyncio's rule):
// the cancel is remembered and raised once the lock is held, and a
// notification that arrived with the cancel goes on to another waiter.

// Adds Condition (and its wait awaiter) to `module`. 0, or -1 with an
// error set.
int RegisterConditionType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_CONDITION_H_
