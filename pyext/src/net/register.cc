#include "pyext/src/net/register.h"

#include "pyext/src/net/connection_unit.h"
#include "pyext/src/net/datagram.h"
#include "pyext/src/net/listener.h"
#include "pyext/src/net/tls_bio.h"
#include "pyext/src/net/tls_context.h"
#include "pyext/src/net/transport.h"

namespace mt::pyext {
namespace {

// _transports_open() -> (stream, datagram): socket transports open now.
PyObject* Module_transports_open(PyObject*, PyObject*) {
  using transport::ConnectionKind;
  return Py_BuildValue("(LL)",
                       static_cast<long long>(transport::OpenConnections(ConnectionKind::kStream)),
                       static_cast<long long>(transport::OpenConnections(ConnectionKind::kDatagram)));
}

PyMethodDef functions[] = {
    {"_transports_open", Module_transports_open, METH_NOARGS,
     "_transports_open() -> (stream, datagram): socket transports open now."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterNetPackage(PyObject* module) {
  if (PyModule_AddFunctions(module, functions) < 0) return -1;
  if (RegisterTransportTypes(module) < 0 || RegisterListenerType(module) < 0 ||
      tls::RegisterTlsContextType(module) < 0 || tls::RegisterTlsBioType(module) < 0) {
    return -1;
  }
  return RegisterDatagramType(module);
}

}  // namespace mt::pyext
