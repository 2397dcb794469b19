#ifndef MT_PYEXT_SRC_SERIAL_TASKS_H_
#define MT_PYEXT_SRC_SERIAL_TASKS_H_

#include <Python.h>

namespace mt::pyext {

// Adds _serial_task (serial_tasks.cc). 0 or -1.
int RegisterSerialTasks(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SERIAL_TASKS_H_
