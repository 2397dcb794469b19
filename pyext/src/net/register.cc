#include "pyext/src/net/register.h"

#include "pyext/src/net/datagram.h"
#include "pyext/src/net/listener.h"
#include "pyext/src/net/tls_bio.h"
#include "pyext/src/net/tls_context.h"
#include "pyext/src/net/transport.h"

namespace mt::pyext {

int RegisterNetPackage(PyObject* module) {
  if (RegisterTransportTypes(module) < 0 || RegisterListenerType(module) < 0 ||
      tls::RegisterTlsContextType(module) < 0 || tls::RegisterTlsBioType(module) < 0) {
    return -1;
  }
  return RegisterDatagramType(module);
}

}  // namespace mt::pyext
