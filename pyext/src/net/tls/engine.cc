// The TLS engine on BoringSSL: contexts and connections behind the C table
// of engine_api.h. Nothing here knows about Python or sockets.

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "pyext/src/net/tls/byte_queue.h"
#include "pyext/src/net/tls/engine_api.h"

struct MtTlsCtx {
  SSL_CTX* ssl_ctx = nullptr;
  std::atomic<int> refs{1};
  int verify_mode = MT_TLS_VERIFY_NONE;
  bool check_hostname = false;
  MtTlsKeylogFn keylog = nullptr;
  void* keylog_arg = nullptr;
  MtTlsServerNameFn server_name_hook = nullptr;
  void* server_name_arg = nullptr;
  std::string alpn;  // Wire format; a server's preference list.
  bool tickets = true;
  // A client's sessions to resume, by server name: the newest one each.
  std::mutex sessions_mu;
  std::map<std::string, SSL_SESSION*> sessions;
};

struct MtTlsConn {
  SSL* ssl = nullptr;
  MtTlsCtx* ctx = nullptr;  // One reference; switched by the SNI hook.
  mt::tls::ByteQueue in;
  mt::tls::ByteQueue out;
  std::string server_name;  // A client's: the session cache's key.
  std::string shared_ciphers;  // A server's, from the ClientHello.
};

namespace {

int ctx_index = -1;
int conn_index = -1;
std::once_flag indexes_once;

void InitIndexes() {
  std::call_once(indexes_once, [] {
    ctx_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    conn_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  });
}

MtTlsCtx* CtxOf(const SSL* ssl) {
  return static_cast<MtTlsCtx*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index));
}

MtTlsConn* ConnOf(const SSL* ssl) {
  return static_cast<MtTlsConn*>(SSL_get_ex_data(ssl, conn_index));
}

void Copy(char* out, std::size_t cap, const char* text) {
  if (cap == 0) return;
  std::snprintf(out, cap, "%s", text != nullptr ? text : "");
}

// The ssl module's short library names (its _ssl_data tables), from
// BoringSSL's library numbers, which differ from OpenSSL's.
const char* LibraryName(int lib) {
  switch (lib) {
    case ERR_LIB_SSL: return "SSL";
    case ERR_LIB_PEM: return "PEM";
    case ERR_LIB_X509: return "X509";
    case ERR_LIB_X509V3: return "X509V3";
    case ERR_LIB_ASN1: return "ASN1";
    case ERR_LIB_EVP: return "EVP";
    case ERR_LIB_RSA: return "RSA";
    case ERR_LIB_EC: return "EC";
    case ERR_LIB_BUF: return "BUF";
    case ERR_LIB_SYS: return "SYS";
    case ERR_LIB_CIPHER: return "CIPHER";
    case ERR_LIB_PKCS8: return "PKCS8";
    case ERR_LIB_DIGEST: return "DIGEST";
    default: return "";
  }
}

void Clear(MtTlsError* err) {
  if (err == nullptr) return;
  std::memset(err, 0, sizeof(*err));
}

// Fills `err` from BoringSSL's error queue (which it empties) under `kind`,
// with `fallback` as the sentence when the queue has nothing.
void FromQueue(MtTlsError* err, int kind, const char* fallback) {
  uint32_t code = ERR_get_error();
  // The first error is the cause; later ones are context.
  while (ERR_get_error() != 0) {
  }
  if (err == nullptr) return;
  Clear(err);
  err->kind = kind;
  if (code == 0) {
    Copy(err->message, sizeof(err->message), fallback);
    return;
  }
  err->lib = ERR_GET_LIB(code);
  err->reason = ERR_GET_REASON(code);
  Copy(err->library, sizeof(err->library), LibraryName(err->lib));
  const char* reason = ERR_reason_error_string(code);
  Copy(err->reason_name, sizeof(err->reason_name), reason);
  // BoringSSL's reasons are identifiers (NO_SHARED_CIPHER); the sentence
  // is the same words in lower case, as OpenSSL's reads.
  std::string sentence = reason != nullptr ? reason : fallback;
  for (char& c : sentence) c = c == '_' ? ' ' : static_cast<char>(std::tolower(c));
  Copy(err->message, sizeof(err->message), sentence.c_str());
}

void Set(MtTlsError* err, int kind, const char* message) {
  ERR_clear_error();
  if (err == nullptr) return;
  Clear(err);
  err->kind = kind;
  Copy(err->message, sizeof(err->message), message);
}

// --- the BIO over a connection's two queues ---------------------------------

int QueueWrite(BIO* bio, const char* data, int len) {
  auto* conn = static_cast<MtTlsConn*>(BIO_get_data(bio));
  conn->out.Append(data, static_cast<std::size_t>(len));
  return len;
}

int QueueRead(BIO* bio, char* data, int len) {
  auto* conn = static_cast<MtTlsConn*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (conn->in.empty()) {
    // No EOF here: the caller knows about the socket's end and decides.
    BIO_set_retry_read(bio);
    return -1;
  }
  return static_cast<int>(conn->in.Take(data, static_cast<std::size_t>(len)));
}

long QueueCtrl(BIO* bio, int cmd, long, void*) {
  auto* conn = static_cast<MtTlsConn*>(BIO_get_data(bio));
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_PENDING: return static_cast<long>(conn->in.size());
    case BIO_CTRL_WPENDING: return static_cast<long>(conn->out.size());
    default: return 0;
  }
}

const BIO_METHOD* QueueMethod() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "mt_asyncio queues");
    BIO_meth_set_write(m, QueueWrite);
    BIO_meth_set_read(m, QueueRead);
    BIO_meth_set_ctrl(m, QueueCtrl);
    return m;
  }();
  return method;
}

// --- callbacks ----------------------------------------------------------------

void KeylogLine(const SSL* ssl, const char* line) {
  MtTlsCtx* ctx = CtxOf(ssl);
  if (ctx != nullptr && ctx->keylog != nullptr) ctx->keylog(ctx->keylog_arg, line);
}

int ServerName(SSL* ssl, int* alert, void*) {
  // The hook of the context the connection started with (the SNI hook may
  // switch contexts; the first one's hook decides).
  MtTlsConn* conn = ConnOf(ssl);
  MtTlsCtx* ctx = conn != nullptr ? conn->ctx : nullptr;
  if (ctx == nullptr || ctx->server_name_hook == nullptr) return SSL_TLSEXT_ERR_OK;
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  const int refused = ctx->server_name_hook(ctx->server_name_arg, conn, name);
  if (refused != 0) {
    *alert = refused;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

int SelectAlpn(SSL* ssl, const uint8_t** out, uint8_t* out_len, const uint8_t* in,
               unsigned in_len, void*) {
  MtTlsCtx* ctx = CtxOf(ssl);
  if (ctx == nullptr || ctx->alpn.empty()) return SSL_TLSEXT_ERR_NOACK;
  // The server's order decides, as the ssl module's server does.
  uint8_t* chosen = nullptr;
  uint8_t chosen_len = 0;
  const int r = SSL_select_next_proto(
      &chosen, &chosen_len, reinterpret_cast<const uint8_t*>(ctx->alpn.data()),
      static_cast<unsigned>(ctx->alpn.size()), in, in_len);
  if (r != OPENSSL_NPN_NEGOTIATED) return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  *out_len = chosen_len;
  return SSL_TLSEXT_ERR_OK;
}

int NewSession(SSL* ssl, SSL_SESSION* session) {
  MtTlsConn* conn = ConnOf(ssl);
  MtTlsCtx* ctx = CtxOf(ssl);
  if (SSL_is_server(ssl) || conn == nullptr || ctx == nullptr || conn->server_name.empty()) {
    return 0;
  }
  std::lock_guard<std::mutex> lock(ctx->sessions_mu);
  SSL_SESSION*& slot = ctx->sessions[conn->server_name];
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = session;
  return 1;  // We keep the reference.
}

// Remembers the ciphers a ClientHello offered that the server has too
// (SSLObject.shared_ciphers()).
enum ssl_select_cert_result_t SelectCertificate(const SSL_CLIENT_HELLO* hello) {
  MtTlsConn* conn = ConnOf(hello->ssl);
  if (conn == nullptr) return ssl_select_cert_success;
  STACK_OF(SSL_CIPHER)* ours = SSL_get_ciphers(hello->ssl);
  CBS suites;
  CBS_init(&suites, hello->cipher_suites, hello->cipher_suites_len);
  std::string names;
  while (CBS_len(&suites) >= 2) {
    uint16_t id;
    if (!CBS_get_u16(&suites, &id)) break;
    const SSL_CIPHER* cipher = SSL_get_cipher_by_value(id);
    if (cipher == nullptr) continue;
    bool shared = SSL_CIPHER_get_min_version(cipher) >= TLS1_3_VERSION;
    for (size_t i = 0; !shared && i < sk_SSL_CIPHER_num(ours); ++i) {
      shared = sk_SSL_CIPHER_value(ours, i) == cipher;
    }
    if (!shared) continue;
    if (!names.empty()) names += ':';
    names += SSL_CIPHER_get_name(cipher);
    names += '/';
    names += SSL_CIPHER_get_min_version(cipher) >= TLS1_3_VERSION ? "TLSv1.3" : "TLSv1.2";
    names += '/';
    names += std::to_string(SSL_CIPHER_get_bits(cipher, nullptr));
  }
  conn->shared_ciphers = std::move(names);
  return ssl_select_cert_success;
}

// --- the table's functions ------------------------------------------------------

const char* LibraryVersion() { return OpenSSL_version(OPENSSL_VERSION); }

MtTlsCtx* CtxNew(MtTlsError* err) {
  InitIndexes();
  SSL_CTX* ssl_ctx = SSL_CTX_new(TLS_method());
  if (ssl_ctx == nullptr) {
    FromQueue(err, MT_TLS_ERR_SSL, "cannot make a TLS context");
    return nullptr;
  }
  auto* ctx = new MtTlsCtx();
  ctx->ssl_ctx = ssl_ctx;
  SSL_CTX_set_ex_data(ssl_ctx, ctx_index, ctx);
  // Peers that do not renegotiate are the only ones we talk to; BoringSSL
  // refuses a renegotiation by default, and so do we (asyncio's sslproto
  // never allowed one either).
  SSL_CTX_set_keylog_callback(ssl_ctx, KeylogLine);
  SSL_CTX_set_mode(ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // The server's hooks act only on accepted connections, the client's
  // session cache only on connecting ones.
  SSL_CTX_set_tlsext_servername_callback(ssl_ctx, ServerName);
  SSL_CTX_set_alpn_select_cb(ssl_ctx, SelectAlpn, nullptr);
  SSL_CTX_set_select_certificate_cb(ssl_ctx, SelectCertificate);
  // Servers keep sessions in BoringSSL's cache (TLS 1.2 session IDs);
  // clients in ours, by server name (NewSession).
  SSL_CTX_set_session_cache_mode(ssl_ctx, SSL_SESS_CACHE_BOTH | SSL_SESS_CACHE_NO_INTERNAL_LOOKUP |
                                              SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ssl_ctx, NewSession);
  // As the ssl module: a wildcard only as a whole left-most label.
  X509_VERIFY_PARAM_set_hostflags(SSL_CTX_get0_param(ssl_ctx),
                                  X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return ctx;
}

void CtxRef(MtTlsCtx* ctx) { ctx->refs.fetch_add(1, std::memory_order_relaxed); }

void CtxUnref(MtTlsCtx* ctx) {
  if (ctx == nullptr || ctx->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  for (auto& [name, session] : ctx->sessions) SSL_SESSION_free(session);
  SSL_CTX_free(ctx->ssl_ctx);
  delete ctx;
}

struct Password {
  const char* data;
  size_t len;
  bool asked = false;
};

int GivePassword(char* buf, int size, int, void* arg) {
  auto* p = static_cast<Password*>(arg);
  p->asked = true;
  if (p->data == nullptr || p->len > static_cast<size_t>(size)) return -1;
  std::memcpy(buf, p->data, p->len);
  return static_cast<int>(p->len);
}

int CtxUseCertChain(MtTlsCtx* ctx, const char* chain_pem, size_t chain_len, const char* key_pem,
                    size_t key_len, const char* password, size_t password_len,
                    MtTlsError* err) {
  ERR_clear_error();
  bssl::UniquePtr<BIO> chain(BIO_new_mem_buf(chain_pem, static_cast<int>(chain_len)));
  bssl::UniquePtr<X509> leaf(PEM_read_bio_X509_AUX(chain.get(), nullptr, nullptr, nullptr));
  if (!leaf) {
    FromQueue(err, MT_TLS_ERR_SSL, "no certificate in the chain file");
    return MT_TLS_FAILED;
  }
  Password pw{password, password_len};
  bssl::UniquePtr<BIO> key_bio(BIO_new_mem_buf(key_pem, static_cast<int>(key_len)));
  bssl::UniquePtr<EVP_PKEY> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, GivePassword, &pw));
  if (!key) {
    FromQueue(err, MT_TLS_ERR_SSL,
              pw.asked ? "bad password or key" : "no private key in the key file");
    return MT_TLS_FAILED;
  }
  if (!SSL_CTX_use_certificate(ctx->ssl_ctx, leaf.get())) {
    FromQueue(err, MT_TLS_ERR_SSL, "cannot use the certificate");
    return MT_TLS_FAILED;
  }
  SSL_CTX_clear_chain_certs(ctx->ssl_ctx);
  for (;;) {
    X509* extra = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (!SSL_CTX_add0_chain_cert(ctx->ssl_ctx, extra)) {
      X509_free(extra);
      FromQueue(err, MT_TLS_ERR_SSL, "cannot add a chain certificate");
      return MT_TLS_FAILED;
    }
  }
  ERR_clear_error();  // The read past the last certificate.
  if (!SSL_CTX_use_PrivateKey(ctx->ssl_ctx, key.get()) ||
      !SSL_CTX_check_private_key(ctx->ssl_ctx)) {
    FromQueue(err, MT_TLS_ERR_SSL, "key values mismatch");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxAddTrustPem(MtTlsCtx* ctx, const char* pem, size_t len, MtTlsError* err) {
  ERR_clear_error();
  bssl::UniquePtr<BIO> bio(BIO_new_mem_buf(pem, static_cast<int>(len)));
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio.get(), nullptr, nullptr, nullptr);
  if (infos == nullptr) {
    FromQueue(err, MT_TLS_ERR_SSL, "no certificate or crl found");
    return MT_TLS_FAILED;
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx->ssl_ctx);
  int added = 0;
  for (size_t i = 0; i < sk_X509_INFO_num(infos); ++i) {
    X509_INFO* info = sk_X509_INFO_value(infos, i);
    // A certificate already in the store is no error (the ssl module's
    // load_verify_locations ignores duplicates too).
    if (info->x509 != nullptr) {
      X509_STORE_add_cert(store, info->x509);
      ++added;
    }
    if (info->crl != nullptr) {
      X509_STORE_add_crl(store, info->crl);
      ++added;
    }
  }
  sk_X509_INFO_pop_free(infos, X509_INFO_free);
  ERR_clear_error();
  if (added == 0) {
    Set(err, MT_TLS_ERR_SSL, "no certificate or crl found");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxAddTrustDer(MtTlsCtx* ctx, const uint8_t* der, size_t len, MtTlsError* err) {
  ERR_clear_error();
  X509_STORE* store = SSL_CTX_get_cert_store(ctx->ssl_ctx);
  const uint8_t* p = der;
  const uint8_t* end = der + len;
  int added = 0;
  while (p < end) {
    X509* cert = d2i_X509(nullptr, &p, static_cast<long>(end - p));
    if (cert == nullptr) {
      FromQueue(err, MT_TLS_ERR_SSL, added == 0 ? "not enough data" : "bad DER certificate");
      return MT_TLS_FAILED;
    }
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++added;
  }
  ERR_clear_error();
  if (added == 0) {
    Set(err, MT_TLS_ERR_SSL, "not enough data");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxAddTrustDir(MtTlsCtx* ctx, const char* path, MtTlsError* err) {
  ERR_clear_error();
  if (!X509_STORE_load_locations(SSL_CTX_get_cert_store(ctx->ssl_ctx), nullptr, path)) {
    FromQueue(err, MT_TLS_ERR_SSL, "cannot use the CA directory");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

void ApplyVerify(MtTlsCtx* ctx) {
  int mode = SSL_VERIFY_NONE;
  if (ctx->verify_mode == MT_TLS_VERIFY_OPTIONAL) {
    mode = SSL_VERIFY_PEER;
  } else if (ctx->verify_mode == MT_TLS_VERIFY_REQUIRED) {
    // Ignored by clients, which always fail without a server certificate.
    mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  }
  SSL_CTX_set_verify(ctx->ssl_ctx, mode, nullptr);
}

int CtxSetVerify(MtTlsCtx* ctx, int mode, int check_hostname) {
  ctx->verify_mode = mode;
  ctx->check_hostname = check_hostname != 0;
  ApplyVerify(ctx);
  return MT_TLS_OK;
}

int CtxSetVerifyFlags(MtTlsCtx* ctx, unsigned long flags, MtTlsError* err) {
  // The ssl module's VERIFY_* values (OpenSSL 3's) to BoringSSL's.
  struct Flag {
    unsigned long openssl;
    unsigned long ours;
  };
  static constexpr Flag kFlags[] = {
      {0x4, X509_V_FLAG_CRL_CHECK},
      {0x8, X509_V_FLAG_CRL_CHECK_ALL},
      {0x20, X509_V_FLAG_X509_STRICT},  // Always on in BoringSSL.
      {0x40, X509_V_FLAG_ALLOW_PROXY_CERTS},
      {0x8000, X509_V_FLAG_TRUSTED_FIRST},
      {0x80000, X509_V_FLAG_PARTIAL_CHAIN},
  };
  unsigned long mapped = 0;
  unsigned long known = 0;
  for (const Flag& f : kFlags) {
    known |= f.openssl;
    if (flags & f.openssl) mapped |= f.ours;
  }
  if (flags & ~known) {
    Set(err, MT_TLS_ERR_ARGUMENT, "verify_flags: a flag BoringSSL has no equivalent for");
    return MT_TLS_FAILED;
  }
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx->ssl_ctx);
  X509_VERIFY_PARAM_clear_flags(param, ~0UL);
  X509_VERIFY_PARAM_set_flags(param, mapped);
  return MT_TLS_OK;
}

int CtxSetVersions(MtTlsCtx* ctx, int min_version, int max_version, MtTlsError* err) {
  ERR_clear_error();
  if (!SSL_CTX_set_min_proto_version(ctx->ssl_ctx, static_cast<uint16_t>(min_version)) ||
      !SSL_CTX_set_max_proto_version(ctx->ssl_ctx, static_cast<uint16_t>(max_version))) {
    FromQueue(err, MT_TLS_ERR_ARGUMENT, "unsupported protocol version");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxSetCiphers(MtTlsCtx* ctx, const char* spec, MtTlsError* err) {
  ERR_clear_error();
  if (!SSL_CTX_set_strict_cipher_list(ctx->ssl_ctx, spec)) {
    FromQueue(err, MT_TLS_ERR_SSL, "No cipher can be selected.");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxSetCurves(MtTlsCtx* ctx, const char* spec, MtTlsError* err) {
  ERR_clear_error();
  if (!SSL_CTX_set1_curves_list(ctx->ssl_ctx, spec)) {
    FromQueue(err, MT_TLS_ERR_ARGUMENT, "unknown elliptic curve name");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxSetAlpn(MtTlsCtx* ctx, const uint8_t* wire, size_t len, MtTlsError* err) {
  ctx->alpn.assign(reinterpret_cast<const char*>(wire), len);
  if (SSL_CTX_set_alpn_protos(ctx->ssl_ctx, wire, len) != 0) {
    FromQueue(err, MT_TLS_ERR_ARGUMENT, "bad ALPN protocol list");
    return MT_TLS_FAILED;
  }
  return MT_TLS_OK;
}

int CtxSetTickets(MtTlsCtx* ctx, int enabled, int count) {
  ctx->tickets = enabled != 0;
  if (enabled) {
    SSL_CTX_clear_options(ctx->ssl_ctx, SSL_OP_NO_TICKET);
  } else {
    SSL_CTX_set_options(ctx->ssl_ctx, SSL_OP_NO_TICKET);
  }
  (void)count;  // BoringSSL's TLS 1.3 server sends two; not configurable.
  return MT_TLS_OK;
}

void CtxSetCheckCommonName(MtTlsCtx* ctx, int enabled) {
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx->ssl_ctx);
  unsigned flags = X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS;
  if (!enabled) flags |= X509_CHECK_FLAG_NEVER_CHECK_SUBJECT;
  X509_VERIFY_PARAM_set_hostflags(param, flags);
}

void CtxSetServerPreference(MtTlsCtx* ctx, int enabled) {
  if (enabled) {
    SSL_CTX_set_options(ctx->ssl_ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  } else {
    SSL_CTX_clear_options(ctx->ssl_ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  }
}

void CtxSetKeylog(MtTlsCtx* ctx, MtTlsKeylogFn fn, void* arg) {
  ctx->keylog = fn;
  ctx->keylog_arg = arg;
}

void CtxSetServerNameHook(MtTlsCtx* ctx, MtTlsServerNameFn fn, void* arg) {
  ctx->server_name_hook = fn;
  ctx->server_name_arg = arg;
}

size_t CtxCipherNames(MtTlsCtx* ctx, char* out, size_t cap) {
  std::string names;
  STACK_OF(SSL_CIPHER)* ciphers = SSL_CTX_get_ciphers(ctx->ssl_ctx);
  for (size_t i = 0; i < sk_SSL_CIPHER_num(ciphers); ++i) {
    if (!names.empty()) names += ':';
    names += SSL_CIPHER_get_name(sk_SSL_CIPHER_value(ciphers, i));
  }
  Copy(out, cap, names.c_str());
  return names.size();
}

bool IsIpAddress(const char* name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

MtTlsConn* ConnNew(MtTlsCtx* ctx, int server_side, const char* server_name, MtTlsError* err) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx->ssl_ctx);
  if (ssl == nullptr) {
    FromQueue(err, MT_TLS_ERR_SSL, "cannot make a TLS connection");
    return nullptr;
  }
  auto* conn = new MtTlsConn();
  conn->ssl = ssl;
  conn->ctx = ctx;
  CtxRef(ctx);
  SSL_set_ex_data(ssl, conn_index, conn);
  BIO* bio = BIO_new(QueueMethod());
  BIO_set_data(bio, conn);
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);  // One BIO for both directions; SSL owns it.
  if (server_side) {
    SSL_set_accept_state(ssl);
    return conn;
  }
  SSL_set_connect_state(ssl);
  const bool named = server_name != nullptr && server_name[0] != '\0';
  if (named) {
    conn->server_name = server_name;
    const bool ip = IsIpAddress(server_name);
    // No SNI for an address (RFC 6066), as the ssl module.
    if (!ip) SSL_set_tlsext_host_name(ssl, server_name);
    if (ctx->check_hostname) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      const int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, server_name)
                        : X509_VERIFY_PARAM_set1_host(param, server_name, strlen(server_name));
      if (!ok) {
        FromQueue(err, MT_TLS_ERR_ARGUMENT, "invalid server_hostname");
        SSL_free(ssl);
        CtxUnref(ctx);
        delete conn;
        return nullptr;
      }
    }
    if (ctx->tickets) {
      std::lock_guard<std::mutex> lock(ctx->sessions_mu);
      auto it = ctx->sessions.find(conn->server_name);
      if (it != ctx->sessions.end()) SSL_set_session(ssl, it->second);
    }
  }
  return conn;
}

void ConnFree(MtTlsConn* conn) {
  if (conn == nullptr) return;
  SSL_free(conn->ssl);
  CtxUnref(conn->ctx);
  delete conn;
}

int ConnSetCtx(MtTlsConn* conn, MtTlsCtx* ctx) {
  if (SSL_set_SSL_CTX(conn->ssl, ctx->ssl_ctx) == nullptr) return MT_TLS_FAILED;
  // Verification follows the new context too (a server asking this name's
  // clients for certificates).
  SSL_set_verify(conn->ssl, SSL_CTX_get_verify_mode(ctx->ssl_ctx), nullptr);
  return MT_TLS_OK;
}

void ConnFeed(MtTlsConn* conn, const char* data, size_t len) { conn->in.Append(data, len); }

size_t ConnFedPending(MtTlsConn* conn) { return conn->in.size(); }

// Why the last call on `ssl` returning `ret` failed, into `err`. Returns
// the MT_TLS_* result for it.
int Failure(MtTlsConn* conn, int ret, MtTlsError* err) {
  const int why = SSL_get_error(conn->ssl, ret);
  switch (why) {
    case SSL_ERROR_WANT_READ:
      return MT_TLS_WANT_READ;
    case SSL_ERROR_ZERO_RETURN:
      Set(err, MT_TLS_ERR_ZERO_RETURN, "TLS/SSL connection has been closed (EOF)");
      return MT_TLS_CLOSED;
    default:
      break;
  }
  const long verify = SSL_get_verify_result(conn->ssl);
  uint32_t code = ERR_peek_error();
  if (verify != X509_V_OK && ERR_GET_LIB(code) == ERR_LIB_SSL &&
      ERR_GET_REASON(code) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    FromQueue(err, MT_TLS_ERR_VERIFY, "certificate verify failed");
    if (err != nullptr) {
      err->verify_code = verify;
      Copy(err->message, sizeof(err->message), X509_verify_cert_error_string(verify));
    }
    return MT_TLS_FAILED;
  }
  FromQueue(err, MT_TLS_ERR_SSL, "TLS protocol error");
  return MT_TLS_FAILED;
}

int ConnHandshake(MtTlsConn* conn, MtTlsError* err) {
  ERR_clear_error();
  const int r = SSL_do_handshake(conn->ssl);
  if (r == 1) {
    // A TLS 1.3 server's session tickets wait in BoringSSL for its first
    // write; a server that only reads would never send them, and its
    // clients could never resume. An empty write sends them now.
    if (SSL_is_server(conn->ssl)) {
      SSL_write(conn->ssl, "", 0);
      ERR_clear_error();
    }
    return MT_TLS_OK;
  }
  const int result = Failure(conn, r, err);
  return result == MT_TLS_CLOSED ? MT_TLS_FAILED : result;
}

size_t ConnRead(MtTlsConn* conn, char* buf, size_t cap, int* status, MtTlsError* err) {
  ERR_clear_error();
  const int n = SSL_read(conn->ssl, buf, static_cast<int>(std::min<size_t>(cap, INT32_MAX)));
  if (n > 0) {
    *status = MT_TLS_OK;
    return static_cast<size_t>(n);
  }
  *status = Failure(conn, n, err);
  return 0;
}

int ConnWrite(MtTlsConn* conn, const char* data, size_t len, MtTlsError* err) {
  ERR_clear_error();
  while (len > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(len, 1 << 30));
    const int n = SSL_write(conn->ssl, data, chunk);
    if (n <= 0) {
      const int r = Failure(conn, n, err);
      if (r == MT_TLS_WANT_READ) {
        // Only mid-handshake, which the caller does not write in.
        Set(err, MT_TLS_ERR_SSL, "write before the handshake finished");
      }
      return MT_TLS_FAILED;
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return MT_TLS_OK;
}

int ConnShutdown(MtTlsConn* conn, MtTlsError* err) {
  ERR_clear_error();
  const int r = SSL_shutdown(conn->ssl);
  if (r == 1) return MT_TLS_OK;
  if (r == 0) return MT_TLS_WANT_READ;
  const int result = Failure(conn, r, err);
  return result == MT_TLS_CLOSED ? MT_TLS_OK : result;
}

const char* ConnOutPeek(MtTlsConn* conn, size_t* len) {
  *len = conn->out.size();
  return conn->out.front();
}

void ConnOutConsume(MtTlsConn* conn, size_t len) { conn->out.Consume(len); }

size_t ConnOutPending(MtTlsConn* conn) { return conn->out.size(); }

int ConnVersion(MtTlsConn* conn) { return SSL_version(conn->ssl); }

const char* ConnVersionName(MtTlsConn* conn) { return SSL_get_version(conn->ssl); }

const char* ConnCipherName(MtTlsConn* conn) {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(conn->ssl);
  return cipher != nullptr ? SSL_CIPHER_get_name(cipher) : nullptr;
}

int ConnCipherBits(MtTlsConn* conn) {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(conn->ssl);
  return cipher != nullptr ? SSL_CIPHER_get_bits(cipher, nullptr) : 0;
}

size_t ConnAlpn(MtTlsConn* conn, char* out, size_t cap) {
  const uint8_t* proto = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(conn->ssl, &proto, &len);
  std::string name(reinterpret_cast<const char*>(proto), proto != nullptr ? len : 0);
  Copy(out, cap, name.c_str());
  return name.size();
}

size_t ConnServerName(MtTlsConn* conn, char* out, size_t cap) {
  const char* name = SSL_is_server(conn->ssl)
                         ? SSL_get_servername(conn->ssl, TLSEXT_NAMETYPE_host_name)
                         : conn->server_name.c_str();
  Copy(out, cap, name);
  return name != nullptr ? std::strlen(name) : 0;
}

const uint8_t* ConnPeerCert(MtTlsConn* conn, size_t index, size_t* len) {
  const STACK_OF(CRYPTO_BUFFER)* chain = SSL_get0_peer_certificates(conn->ssl);
  if (chain == nullptr || index >= sk_CRYPTO_BUFFER_num(chain)) {
    *len = 0;
    return nullptr;
  }
  const CRYPTO_BUFFER* cert = sk_CRYPTO_BUFFER_value(chain, index);
  *len = CRYPTO_BUFFER_len(cert);
  return CRYPTO_BUFFER_data(cert);
}

long ConnVerifyResult(MtTlsConn* conn) { return SSL_get_verify_result(conn->ssl); }

int ConnSessionReused(MtTlsConn* conn) { return SSL_session_reused(conn->ssl); }

int ConnIsServer(MtTlsConn* conn) { return SSL_is_server(conn->ssl); }

size_t ConnSharedCiphers(MtTlsConn* conn, char* out, size_t cap) {
  Copy(out, cap, conn->shared_ciphers.c_str());
  return conn->shared_ciphers.size();
}

constexpr MtTlsEngine kEngine = {
    .abi = MT_TLS_ENGINE_ABI,
    .struct_size = sizeof(MtTlsEngine),
    .library_version = LibraryVersion,
    .ctx_new = CtxNew,
    .ctx_ref = CtxRef,
    .ctx_unref = CtxUnref,
    .ctx_use_cert_chain = CtxUseCertChain,
    .ctx_add_trust_pem = CtxAddTrustPem,
    .ctx_add_trust_der = CtxAddTrustDer,
    .ctx_add_trust_dir = CtxAddTrustDir,
    .ctx_set_verify = CtxSetVerify,
    .ctx_set_verify_flags = CtxSetVerifyFlags,
    .ctx_set_versions = CtxSetVersions,
    .ctx_set_ciphers = CtxSetCiphers,
    .ctx_set_curves = CtxSetCurves,
    .ctx_set_alpn = CtxSetAlpn,
    .ctx_set_tickets = CtxSetTickets,
    .ctx_set_check_common_name = CtxSetCheckCommonName,
    .ctx_set_server_preference = CtxSetServerPreference,
    .ctx_set_keylog = CtxSetKeylog,
    .ctx_set_server_name_hook = CtxSetServerNameHook,
    .ctx_cipher_names = CtxCipherNames,
    .conn_new = ConnNew,
    .conn_free = ConnFree,
    .conn_set_ctx = ConnSetCtx,
    .conn_feed = ConnFeed,
    .conn_fed_pending = ConnFedPending,
    .conn_handshake = ConnHandshake,
    .conn_read = ConnRead,
    .conn_write = ConnWrite,
    .conn_shutdown = ConnShutdown,
    .conn_out_peek = ConnOutPeek,
    .conn_out_consume = ConnOutConsume,
    .conn_out_pending = ConnOutPending,
    .conn_version = ConnVersion,
    .conn_version_name = ConnVersionName,
    .conn_cipher_name = ConnCipherName,
    .conn_cipher_bits = ConnCipherBits,
    .conn_alpn = ConnAlpn,
    .conn_server_name = ConnServerName,
    .conn_peer_cert = ConnPeerCert,
    .conn_verify_result = ConnVerifyResult,
    .conn_session_reused = ConnSessionReused,
    .conn_is_server = ConnIsServer,
    .conn_shared_ciphers = ConnSharedCiphers,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const MtTlsEngine* mt_tls_engine_v1(void) {
  return &kEngine;
}
