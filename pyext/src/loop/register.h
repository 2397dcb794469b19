#ifndef MT_PYEXT_SRC_LOOP_REGISTER_H_
#define MT_PYEXT_SRC_LOOP_REGISTER_H_

#include <Python.h>

namespace mt::pyext {

// Adds the loop package to _core: Loop, Handle, TimerHandle, Task,
// gather(), the fd watchers and the strand functions.
// 0, or -1 with an error set.
int RegisterLoopPackage(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_REGISTER_H_
