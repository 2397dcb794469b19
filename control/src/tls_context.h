// The TLS side of the control plane's TCP listener, on the system's
// OpenSSL (the library Debian's gRPC is built on): one server context
// made from the PEM material the service was given.
//
// The listener terminates TLS itself, instead of leaving it to gRPC, so
// that it can read the HTTP/2 frames a peer sends before gRPC does (see
// h2_inspector.h).

#ifndef MT_ASYNCIO_CONTROL_SRC_TLS_CONTEXT_H_
#define MT_ASYNCIO_CONTROL_SRC_TLS_CONTEXT_H_

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mt::control {

class TlsContext {
 public:
  // A certificate chain whose first certificate matches `key_pem`, and,
  // when `client_ca_pem` is not empty, the CA bundle client certificates
  // must chain to (mutual TLS: a client without one fails the
  // handshake). TLS 1.2 and 1.3, no renegotiation, ALPN "h2".
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(const std::string& cert_chain_pem,
                                                            const std::string& key_pem,
                                                            const std::string& client_ca_pem);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A server session on the connected socket `fd` (not owned), or null.
  SSL* NewSession(int fd) const;

  // The client certificate's subject in RFC 2253 form ("CN=ops,O=acme"),
  // or "" without one.
  static std::string PeerSubject(SSL* ssl);
  // OpenSSL's reason for the last failure on this thread, the queue
  // emptied.
  static std::string LastError();

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* const ctx_;
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_TLS_CONTEXT_H_
