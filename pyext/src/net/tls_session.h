#ifndef MT_PYEXT_SRC_NET_TLS_SESSION_H_
#define MT_PYEXT_SRC_NET_TLS_SESSION_H_

#include <Python.h>

#include <atomic>
#include <memory>
#include <string>

#include "pyext/src/net/tls/engine_api.h"

namespace mt::pyext::tls {

// Where a TLS connection is, as asyncio's sslproto names its states.
enum class TlsState {
  kHandshake,  // Stepping the handshake; the application knows nothing yet.
  kWrapped,    // connection_made was called; records flow.
  kShutdown,   // close(): our close_notify is out, the peer's awaited.
  kDone,       // Failed or finished: the engine is not stepped any more.
};

// The TLS half of a stream connection on the native engine: the engine's
// connection and what the transport needs around it. The transport
// (transport.cc) owns one per TLS connection and steps it on the
// connection's strand; every engine call is made under the connection's
// lock.
class TlsSession {
 public:
  // From the tuple mt_asyncio.tls hands the loop:
  //   (context, core, server_side, server_hostname, handshake_timeout,
  //    shutdown_timeout)
  // context: the TLSContext (an ssl.SSLContext, the 'sslcontext' extra),
  // core: its TLSContextCore. New session, or nullptr with an error.
  static std::unique_ptr<TlsSession> FromSpec(PyObject* spec);
  ~TlsSession();

  // Makes the engine's connection. false with the engine's error.
  bool Start(MtTlsError* err);

  // _tls_info(what[, index]) of the transport, under the connection's
  // lock: what it was made with ("context", "server_side",
  // "server_hostname", "established") and what the handshake settled
  // ("version", "cipher", "alpn", "server_name", "shared_ciphers" (name,
  // version, bits triples), "session_reused", "peer_cert" (DER bytes,
  // index in the chain), "verify_result"; None before it finished).
  PyObject* Info(const char* what, Py_ssize_t index);
  // _tls_set_context(core): the SNI callback switching certificates.
  PyObject* SetContext(PyObject* core);

  const MtTlsEngine* engine() const { return engine_; }

  PyObject* context = nullptr;
  PyObject* core = nullptr;
  bool server_side = false;
  std::string server_hostname;
  double handshake_timeout = 60.0;
  double shutdown_timeout = 30.0;
  MtTlsConn* conn = nullptr;

  // --- under the connection's lock ---
  TlsState state = TlsState::kHandshake;

  // --- the strand's ---
  PyObject* waiter = nullptr;  // create_connection's, until the handshake ends.
  PyObject* timer = nullptr;   // The handshake's or the shutdown's TimerHandle.
  bool app_made = false;       // connection_made was called.
  // start_tls(): the protocol already had its connection_made (of the
  // plain connection) and hears none for the TLS one, as sslproto's.
  bool call_connection_made = true;
  bool eof_delivered = false;  // eof_received was called.

 private:
  TlsSession() = default;
  const MtTlsEngine* engine_ = nullptr;
};

}  // namespace mt::pyext::tls

#endif  // MT_PYEXT_SRC_NET_TLS_SESSION_H_
