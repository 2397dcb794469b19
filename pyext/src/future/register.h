#ifndef MT_PYEXT_SRC_FUTURE_REGISTER_H_
#define MT_PYEXT_SRC_FUTURE_REGISTER_H_

#include <Python.h>

namespace mt::pyext {

// Adds the future package to _core: Future and the awaited_by functions.
// 0, or -1 with an error set.
int RegisterFuturePackage(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_FUTURE_REGISTER_H_
