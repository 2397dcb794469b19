#ifndef MT_PYEXT_SRC_LOOP_TASK_GROUP_STATE_H_
#define MT_PYEXT_SRC_LOOP_TASK_GROUP_STATE_H_

#include <Python.h>

namespace mt::pyext {

// `_core._TaskGroupState`: the part of a TaskGroup (mt_asyncio/taskgroups.py)
// that its tasks' done callbacks share, and the lock around it.
//
// A task of ours that finishes with a result reports through a native done
// callback on the worker that completes it: it leaves the live set and, if
// it was the last one, wakes the waiting __aexit__. That is what stdlib's
// _on_task_done does for a success, without a scheduled callback and a
// Python frame per child. A task that fails or is cancelled, and a task
// that is not ours or was done already when added, goes through the
// group's Python _on_task_done, scheduled on the loop as stdlib schedules
// it, so the first failure cancels the others at the same point as there.
//
// The object is also the group's lock (`with state:`), held by the Python
// code around every read and write of the live set, the waiter and the
// aborting flag. Not reentrant.
//
// Adds the type to `module`. 0, or -1 with an error set.
int RegisterTaskGroupState(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_TASK_GROUP_STATE_H_
