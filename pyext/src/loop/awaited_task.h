#ifndef MT_PYEXT_SRC_LOOP_AWAITED_TASK_H_
#define MT_PYEXT_SRC_LOOP_AWAITED_TASK_H_

#include <Python.h>

namespace mt::pyext {

// Adds _create_awaited_task (awaited_task.cc). 0, or -1 with an error set.
int RegisterAwaitedTaskFunctions(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_AWAITED_TASK_H_
