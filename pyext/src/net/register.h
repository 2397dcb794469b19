#ifndef MT_PYEXT_SRC_NET_REGISTER_H_
#define MT_PYEXT_SRC_NET_REGISTER_H_

#include <Python.h>

namespace mt::pyext {

// Adds the net package to _core: the stream transports, the listener and
// the datagram transport.
// 0, or -1 with an error set.
int RegisterNetPackage(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_NET_REGISTER_H_
