#ifndef MT_PYEXT_SRC_LOOP_TASK_H_
#define MT_PYEXT_SRC_LOOP_TASK_H_

#include <Python.h>

#include "runtime/task/task.h"

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
// The runtime unit that steps CurrentTask(), or nullptr (borrowed). Its
// executor may be changed from the step (Task::set_executor).
runtime::task::Task* CurrentTaskUnit();

// A new mt_asyncio Task for `coro` on `loop` (an mt_asyncio loop), as
// Task(coro, loop=loop, name=name, context=context, eager_start=...) would
// build it, without argument parsing. New reference, or nullptr.
PyObject* TaskCreate(PyObject* loop, PyObject* coro, PyObject* name, PyObject* context,
                     bool eager_start);

// Where a task's stepping stands, from its unit's state word alone (no
// lock, no Python call: safe under the loop's registry locks). For the
// control plane's counts.
enum class TaskStepState { kRunning, kReady, kWaiting, kDone };
TaskStepState TaskStepStateOf(PyObject* task);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_TASK_H_
