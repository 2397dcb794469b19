#include "control/src/tls_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;

Bio Reader(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::Status Refused(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", TlsContext::LastError()));
}

// Picks "h2" when the client offers it; without it the handshake goes on
// with no protocol chosen, and gRPC's HTTP/2 preface check decides.
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_len, const unsigned char* in,
               unsigned int in_len, void*) {
  static const unsigned char kH2[] = {'h', '2'};
  for (unsigned int i = 0; i < in_len;) {
    const unsigned int len = in[i];
    if (i + 1 + len > in_len) break;
    if (len == sizeof(kH2) && std::memcmp(in + i + 1, kH2, sizeof(kH2)) == 0) {
      *out = in + i + 1;
      *out_len = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::string TlsContext::LastError() {
  const unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : (code != 0 ? "unknown error" : "no PEM data");
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(const std::string& cert_chain_pem,
                                                               const std::string& key_pem,
                                                               const std::string& client_ca_pem) {
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, CtxFree> ctx(SSL_CTX_new(TLS_server_method()));
  if (ctx == nullptr) return Refused("cannot make a TLS context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // Clients (gRPC's among them) close TCP without a close_notify: that is
  // the end of the connection, not an error.
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                     SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Writes may end part-way, and the buffer may move between retries
  // (it is a std::string that grows).
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                  SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx.get(), 0);

  Bio chain = Reader(cert_chain_pem);
  Cert leaf(PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr) return Refused("the TLS certificate does not load");
  if (SSL_CTX_use_certificate(ctx.get(), leaf.get()) != 1) {
    return Refused("the TLS certificate cannot be used");
  }
  while (X509* next = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx.get(), next) != 1) {  // Takes `next` on success.
      X509_free(next);
      return Refused("a certificate of the TLS chain cannot be used");
    }
  }
  ERR_clear_error();  // The loop ends on "no start line".
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(Reader(key_pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) return Refused("the TLS private key does not load");
  if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return Refused("the TLS private key does not match the certificate");
  }
  if (!client_ca_pem.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    Bio cas = Reader(client_ca_pem);
    int loaded = 0;
    while (Cert ca{PEM_read_bio_X509(cas.get(), nullptr, nullptr, nullptr)}) {
      if (X509_STORE_add_cert(store, ca.get()) != 1) {
        return Refused("a certificate of the client CA cannot be used");
      }
      ++loaded;
    }
    ERR_clear_error();
    if (loaded == 0) return Refused("the client CA does not load");
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectAlpn, nullptr);
  return std::unique_ptr<TlsContext>(new TlsContext(ctx.release()));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

SSL* TlsContext::NewSession(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

std::string TlsContext::PeerSubject(SSL* ssl) {
  Cert peer(SSL_get1_peer_certificate(ssl));
  if (peer == nullptr) return "";
  Bio out(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(out.get(), X509_get_subject_name(peer.get()), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long len = BIO_get_mem_data(out.get(), &data);
  return len > 0 ? std::string(data, static_cast<std::size_t>(len)) : std::string();
}

}  // namespace mt::control
