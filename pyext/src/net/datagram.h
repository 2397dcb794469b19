#ifndef MT_PYEXT_SRC_NET_DATAGRAM_H_
#define MT_PYEXT_SRC_NET_DATAGRAM_H_

#include <Python.h>

namespace mt::pyext {

// Adds DatagramTransport and _make_datagram_transport (UDP and Unix
// datagram endpoints, on the execution model of transport.h). 0 or -1.
int RegisterDatagramType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_NET_DATAGRAM_H_
