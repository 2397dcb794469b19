#ifndef MT_PYEXT_SRC_NET_TLS_ENGINE_H_
#define MT_PYEXT_SRC_NET_TLS_ENGINE_H_

#include <Python.h>

#include <string>

#include "pyext/src/net/tls/engine_api.h"

namespace mt::pyext::tls {

// The TLS engine (libmt_tls_engine.so: BoringSSL behind engine_api.h),
// loaded privately and once.
//
// Why privately: Debian's BoringSSL exports OpenSSL's symbol names. Loaded
// RTLD_LOCAL, its symbols never join the global scope, so CPython's _ssl
// and gRPC, loaded before or after, bind to OpenSSL whatever
// sys.setdlopenflags says. RTLD_DEEPBIND makes the engine and BoringSSL
// look in their own scope first, so a global OpenSSL loaded earlier (a
// process that imported ssl under RTLD_GLOBAL) cannot capture BoringSSL's
// calls into its own libcrypto either. docs/architecture.md argues the
// choice against the alternatives.
//
// The table, once _core._tls_load_engine() has loaded it; nullptr before.
const MtTlsEngine* Engine();

// The ssl module's exception for `err` (its type and attributes: library,
// reason, verify_code, verify_message), made by the Python factory given
// at load time; `server_hostname` names the host of a hostname mismatch.
// New reference (an exception instance); never nullptr.
PyObject* MakeError(const MtTlsError& err, const char* server_hostname = nullptr);
// Raises MakeError(err). Returns nullptr.
PyObject* RaiseError(const MtTlsError& err);

// What a finished handshake adds to the transport's extra info
// (sslcontext, ssl_object, cipher, compression), from the Python hook given
// at load time. New reference (a dict), or nullptr with an error.
PyObject* OnHandshake(PyObject* transport);

// Adds _tls_load_engine(path, make_error, on_handshake) -> the library's
// version. 0 or -1.
int RegisterTlsEngine(PyObject* module);

}  // namespace mt::pyext::tls

#endif  // MT_PYEXT_SRC_NET_TLS_ENGINE_H_
