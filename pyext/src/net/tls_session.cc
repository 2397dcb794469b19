#include "pyext/src/net/tls_session.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/net/tls_context.h"
#include "pyext/src/net/tls_engine.h"

namespace mt::pyext::tls {

std::unique_ptr<TlsSession> TlsSession::FromSpec(PyObject* spec) {
  PyObject *context, *core, *hostname;
  int server_side;
  double handshake_timeout, shutdown_timeout;
  if (!PyArg_ParseTuple(spec, "OOpOdd:tls", &context, &core, &server_side, &hostname,
                        &handshake_timeout, &shutdown_timeout)) {
    return nullptr;
  }
  if (ContextOf(core) == nullptr) return nullptr;
  const MtTlsEngine* engine = Engine();
  if (engine == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the TLS engine is not loaded");
    return nullptr;
  }
  std::unique_ptr<TlsSession> s(new TlsSession());
  s->engine_ = engine;
  s->context = Py_NewRef(context);
  s->core = Py_NewRef(core);
  s->server_side = server_side != 0;
  if (hostname != Py_None) {
    const char* name = PyUnicode_AsUTF8(hostname);
    if (name == nullptr) return nullptr;
    s->server_hostname = name;
  }
  s->handshake_timeout = handshake_timeout;
  s->shutdown_timeout = shutdown_timeout;
  return s;
}

TlsSession::~TlsSession() {
  if (conn != nullptr) engine_->conn_free(conn);
  DecRefAnyThread(context);
  DecRefAnyThread(core);
  DecRefAnyThread(waiter);
  DecRefAnyThread(timer);
}

bool TlsSession::Start(MtTlsError* err) {
  conn = engine_->conn_new(ContextOf(core), server_side ? 1 : 0,
                           server_hostname.empty() ? nullptr : server_hostname.c_str(), err);
  return conn != nullptr;
}

PyObject* TlsSession::Info(const char* what, Py_ssize_t index) {
  // Known from the start.
  if (std::strcmp(what, "context") == 0) return Py_NewRef(context);
  if (std::strcmp(what, "server_side") == 0) return PyBool_FromLong(server_side);
  if (std::strcmp(what, "server_hostname") == 0) {
    if (server_side || server_hostname.empty()) Py_RETURN_NONE;
    return PyUnicode_FromString(server_hostname.c_str());
  }
  if (std::strcmp(what, "established") == 0) {
    return PyBool_FromLong(conn != nullptr && state != TlsState::kHandshake);
  }
  if (conn == nullptr || state == TlsState::kHandshake) Py_RETURN_NONE;
  char text[8192];
  if (std::strcmp(what, "version") == 0) {
    return PyUnicode_FromString(engine_->conn_version_name(conn));
  }
  if (std::strcmp(what, "cipher") == 0) {
    const char* name = engine_->conn_cipher_name(conn);
    if (name == nullptr) Py_RETURN_NONE;
    // The ssl module's (name, protocol, secret bits).
    return Py_BuildValue("(ssi)", name, engine_->conn_version_name(conn),
                         engine_->conn_cipher_bits(conn));
  }
  if (std::strcmp(what, "alpn") == 0) {
    if (engine_->conn_alpn(conn, text, sizeof(text)) == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(text);
  }
  if (std::strcmp(what, "server_name") == 0) {
    if (engine_->conn_server_name(conn, text, sizeof(text)) == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(text);
  }
  if (std::strcmp(what, "shared_ciphers") == 0) {
    // The ssl module's list of (name, version, bits); None for a client.
    if (!server_side) Py_RETURN_NONE;
    engine_->conn_shared_ciphers(conn, text, sizeof(text));
    PyObject* out = PyList_New(0);
    std::string all(text);
    std::size_t at = 0;
    while (out != nullptr && at < all.size()) {
      std::size_t end = all.find(':', at);
      if (end == std::string::npos) end = all.size();
      const std::string entry = all.substr(at, end - at);
      at = end + 1;
      const std::size_t a = entry.find('/');
      const std::size_t b = entry.rfind('/');
      if (a == std::string::npos || a == b) continue;
      PyObject* t = Py_BuildValue("(s#s#i)", entry.data(), static_cast<Py_ssize_t>(a),
                                  entry.data() + a + 1, static_cast<Py_ssize_t>(b - a - 1),
                                  std::atoi(entry.c_str() + b + 1));
      if (t == nullptr || PyList_Append(out, t) < 0) Py_CLEAR(out);
      Py_XDECREF(t);
    }
    return out;
  }
  if (std::strcmp(what, "session_reused") == 0) {
    return PyBool_FromLong(engine_->conn_session_reused(conn));
  }
  if (std::strcmp(what, "verify_result") == 0) {
    return PyLong_FromLong(engine_->conn_verify_result(conn));
  }
  if (std::strcmp(what, "peer_cert") == 0) {
    size_t len = 0;
    const uint8_t* der = engine_->conn_peer_cert(conn, static_cast<size_t>(index), &len);
    if (der == nullptr) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(der),
                                     static_cast<Py_ssize_t>(len));
  }
  PyErr_Format(PyExc_ValueError, "no TLS information named %s", what);
  return nullptr;
}

PyObject* TlsSession::SetContext(PyObject* new_core) {
  MtTlsCtx* ctx = ContextOf(new_core);
  if (ctx == nullptr) return nullptr;
  if (conn == nullptr || engine_->conn_set_ctx(conn, ctx) != MT_TLS_OK) {
    PyErr_SetString(PyExc_ValueError, "cannot switch the TLS context now");
    return nullptr;
  }
  Py_SETREF(core, Py_NewRef(new_core));
  Py_RETURN_NONE;
}

}  // namespace mt::pyext::tls
