#ifndef MT_PYEXT_SRC_TASK_H_
#define MT_PYEXT_SRC_TASK_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core.Task: a Future that steps a coroutine on the runtime's
// workers. At most one worker steps a task at a time and every step
// happens-after the previous one (the runtime's one-word unit state); a
// wake during a step is honoured after it; cancellation is sticky
// (_must_cancel) and delivered at the next suspension point.
//
// Adds Task to `module` (after the Future and Loop types). 0 or -1.
int RegisterTaskType(PyObject* module);

// The task being stepped on this thread, or nullptr (borrowed).
PyObject* CurrentTask();

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_TASK_H_
