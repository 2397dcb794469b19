#ifndef MT_PYEXT_SRC_NET_TLS_CONTEXT_H_
#define MT_PYEXT_SRC_NET_TLS_CONTEXT_H_

#include <Python.h>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/net/tls/engine_api.h"

namespace mt::pyext::tls {

// mt_asyncio._core.TLSContextCore: one engine context. mt_asyncio.tls's
// TLSContext (an ssl.SSLContext) builds one from its settings and hands it
// to the transports; its methods are that class's private interface, not
// an API.

// The engine context of a TLSContextCore object (borrowed), or nullptr
// with a TypeError.
MtTlsCtx* ContextOf(PyObject* core);

// The connection whose handshake this thread is stepping, for the SNI hook:
// its owner (the transport, or the TLSBio) and the lock held around the
// engine, which the hook lets go of while Python runs (the callback may
// ask the connection for its state). Set around each handshake step.
class HandshakeScope {
 public:
  HandshakeScope(PyObject* transport, PyMutex* lock);
  ~HandshakeScope();
  HandshakeScope(const HandshakeScope&) = delete;
  HandshakeScope& operator=(const HandshakeScope&) = delete;
  static HandshakeScope* Current();
  PyObject* transport() const { return transport_; }
  PyMutex* lock() const { return lock_; }

 private:
  PyObject* transport_;
  PyMutex* lock_;
  HandshakeScope* previous_;
};

// Adds TLSContextCore. 0 or -1.
int RegisterTlsContextType(PyObject* module);

}  // namespace mt::pyext::tls

#endif  // MT_PYEXT_SRC_NET_TLS_CONTEXT_H_
