#ifndef MT_PYEXT_SRC_ADMIN_REGISTER_H_
#define MT_PYEXT_SRC_ADMIN_REGISTER_H_

#include <Python.h>

namespace mt::pyext {

// Adds the admin package to _core: _admin_call, _set_admin_handler and the
// _admin_abi capsule the control extension reaches the runtime through.
// 0, or -1 with an error set.
int RegisterAdminPackage(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_ADMIN_REGISTER_H_
