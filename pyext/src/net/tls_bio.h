#ifndef MT_PYEXT_SRC_NET_TLS_BIO_H_
#define MT_PYEXT_SRC_NET_TLS_BIO_H_

#include <Python.h>

namespace mt::pyext::tls {

// mt_asyncio._core.TLSBio: one engine connection driven by Python, for
// TLSContext.wrap_bio() (mt_asyncio.tls's BIO object: what anyio, and so
// httpx, and asyncio's sslproto use). Bytes go in with feed() and come
// out with take(); the stepping calls answer as the engine does. Its
// _tls_info/_tls_set_context are the transport's, so the same TLSObject
// methods serve both. Calls are serialized by a lock of its own.
//
//   TLSBio(spec)               spec: a TLS spec (tls_session.h; timeouts unused)
//   feed(data)                 ciphertext from the peer
//   take() -> bytes            ciphertext for the peer
//   handshake() -> bool        True once done (False: more input needed)
//   read(n) -> (bytes, status) status: 0 data, 1 want read, 2 close_notify
//   write(data)                encrypts all of it
//   shutdown() -> bool         True once the peer's close_notify came too
int RegisterTlsBioType(PyObject* module);

}  // namespace mt::pyext::tls

#endif  // MT_PYEXT_SRC_NET_TLS_BIO_H_
