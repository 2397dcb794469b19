#ifndef MT_PYEXT_SRC_NET_TLS_ENGINE_API_H_
#define MT_PYEXT_SRC_NET_TLS_ENGINE_API_H_

// The TLS engine's whole interface, in C: the one thing the extension and
// the engine library (libmt_tls_engine.so, linked to BoringSSL) share.
//
// Why C and a table of functions: the engine library is loaded privately
// (engine_loader.h: RTLD_LOCAL | RTLD_DEEPBIND), so BoringSSL's symbols,
// which have the same names as OpenSSL's, never meet CPython's _ssl or
// gRPC. Nothing but plain data and opaque handles crosses: no C++ type,
// no allocation freed on the other side, no exception, no Python.
//
// Threads: a context may be used by any number of connections on any
// threads at once once it is configured (the setters are for before its
// first connection, as ssl.SSLContext's are in practice; BoringSSL locks
// what it shares). A connection is used by one thread at a time; the
// caller serializes.
//
// Buffers: a connection reads ciphertext the caller feeds it and leaves
// ciphertext to send in an output queue the caller drains; it never
// touches a socket. Both queues are unbounded: the caller feeds only what
// it read and drains after each call.

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_TLS_ENGINE_ABI 1
#define MT_TLS_ENGINE_SYMBOL "mt_tls_engine_v1"

typedef struct MtTlsCtx MtTlsCtx;
typedef struct MtTlsConn MtTlsConn;

// What went wrong, in the shape the ssl module reports it.
typedef enum {
  MT_TLS_ERR_NONE = 0,
  MT_TLS_ERR_SSL = 1,        // A protocol or configuration error (SSLError).
  MT_TLS_ERR_VERIFY = 2,     // Certificate verification (SSLCertVerificationError).
  MT_TLS_ERR_EOF = 3,        // The peer closed without close_notify.
  MT_TLS_ERR_ZERO_RETURN = 4,  // close_notify arrived (SSLZeroReturnError).
  MT_TLS_ERR_ARGUMENT = 5,   // A bad value from the caller (ValueError).
  MT_TLS_ERR_NOT_FOUND = 6,  // A file or path that does not exist (OSError).
} MtTlsErrorKind;

typedef struct {
  int kind;            // MtTlsErrorKind.
  int lib;             // ERR_GET_LIB of the first queued error, or 0.
  int reason;          // ERR_GET_REASON of it, or 0.
  long verify_code;    // X509_V_ERR_*, with MT_TLS_ERR_VERIFY.
  char library[32];    // "SSL", "PEM", "X509", ... (the ssl module's .library).
  char reason_name[64];  // "CERTIFICATE_VERIFY_FAILED", ... (.reason).
  char message[256];   // A human sentence.
} MtTlsError;

// Results of the stepping calls.
enum {
  MT_TLS_OK = 0,         // Done (handshake finished, shutdown complete).
  MT_TLS_WANT_READ = 1,  // Needs more ciphertext from the peer.
  MT_TLS_CLOSED = 2,     // close_notify received: no more plaintext.
  MT_TLS_FAILED = -1,    // See the MtTlsError.
};

// TLS versions on the wire (0x0303 = TLS 1.2, 0x0304 = TLS 1.3).
enum { MT_TLS_VERSION_1_2 = 0x0303, MT_TLS_VERSION_1_3 = 0x0304 };

// Verify modes, as ssl.CERT_NONE / CERT_OPTIONAL / CERT_REQUIRED.
enum { MT_TLS_VERIFY_NONE = 0, MT_TLS_VERIFY_OPTIONAL = 1, MT_TLS_VERIFY_REQUIRED = 2 };

// Called with each key log line (NSS format, no newline) when a key log is
// set; the caller writes the file.
typedef void (*MtTlsKeylogFn)(void* arg, const char* line);
// A server's SNI hook, during the handshake on the connection's thread:
// may call conn_set_ctx to switch certificates. Returns 0 to go on, or a
// TLS alert number to refuse the handshake.
typedef int (*MtTlsServerNameFn)(void* arg, MtTlsConn* conn, const char* server_name);

typedef struct {
  uint32_t abi;          // MT_TLS_ENGINE_ABI.
  uint32_t struct_size;  // sizeof(MtTlsEngine), for additions at the end.
  const char* (*library_version)(void);  // "BoringSSL ...".

  // --- contexts: reference counted ---
  // A context serves either side, as an ssl.SSLContext of PROTOCOL_TLS
  // does; each connection says which it is.
  MtTlsCtx* (*ctx_new)(MtTlsError* err);
  void (*ctx_ref)(MtTlsCtx* ctx);
  void (*ctx_unref)(MtTlsCtx* ctx);
  // PEM chain (leaf first) and PEM key; `password` may be NULL.
  int (*ctx_use_cert_chain)(MtTlsCtx* ctx, const char* chain_pem, size_t chain_len,
                            const char* key_pem, size_t key_len, const char* password,
                            size_t password_len, MtTlsError* err);
  // Trust anchors: PEM (one or more), or DER (one certificate).
  int (*ctx_add_trust_pem)(MtTlsCtx* ctx, const char* pem, size_t len, MtTlsError* err);
  int (*ctx_add_trust_der)(MtTlsCtx* ctx, const uint8_t* der, size_t len, MtTlsError* err);
  int (*ctx_add_trust_dir)(MtTlsCtx* ctx, const char* path, MtTlsError* err);
  int (*ctx_set_verify)(MtTlsCtx* ctx, int mode, int check_hostname);
  // X509_V_FLAG_* bits as the ssl module's VERIFY_* flags give them.
  int (*ctx_set_verify_flags)(MtTlsCtx* ctx, unsigned long flags, MtTlsError* err);
  // 0 for either: no bound.
  int (*ctx_set_versions)(MtTlsCtx* ctx, int min_version, int max_version, MtTlsError* err);
  int (*ctx_set_ciphers)(MtTlsCtx* ctx, const char* spec, MtTlsError* err);
  int (*ctx_set_curves)(MtTlsCtx* ctx, const char* spec, MtTlsError* err);
  // Wire format (length-prefixed names), in preference order.
  int (*ctx_set_alpn)(MtTlsCtx* ctx, const uint8_t* wire, size_t len, MtTlsError* err);
  // Session tickets (servers: issue them; TLS 1.3 sends `count`).
  int (*ctx_set_tickets)(MtTlsCtx* ctx, int enabled, int count);
  // Whether a certificate's subject CN counts when it has no DNS names
  // (ssl.SSLContext.hostname_checks_common_name).
  void (*ctx_set_check_common_name)(MtTlsCtx* ctx, int enabled);
  // The server picks the cipher from its own list first.
  void (*ctx_set_server_preference)(MtTlsCtx* ctx, int enabled);
  void (*ctx_set_keylog)(MtTlsCtx* ctx, MtTlsKeylogFn fn, void* arg);
  void (*ctx_set_server_name_hook)(MtTlsCtx* ctx, MtTlsServerNameFn fn, void* arg);
  // The names of the ciphers this context offers, ':'-separated, into
  // `out` (NUL-terminated, truncated to `cap`). Returns the full length.
  size_t (*ctx_cipher_names)(MtTlsCtx* ctx, char* out, size_t cap);

  // --- connections ---
  // `server_name` (clients): SNI, the name checked against the
  // certificate, and the key of the session cache; NULL or "" for none.
  MtTlsConn* (*conn_new)(MtTlsCtx* ctx, int server_side, const char* server_name,
                         MtTlsError* err);
  void (*conn_free)(MtTlsConn* conn);
  // Switches the connection's certificate and settings (from the SNI hook).
  int (*conn_set_ctx)(MtTlsConn* conn, MtTlsCtx* ctx);
  // Ciphertext from the peer.
  void (*conn_feed)(MtTlsConn* conn, const char* data, size_t len);
  // Bytes fed and not yet consumed.
  size_t (*conn_fed_pending)(MtTlsConn* conn);
  // Steps the handshake: MT_TLS_OK, MT_TLS_WANT_READ or MT_TLS_FAILED.
  int (*conn_handshake)(MtTlsConn* conn, MtTlsError* err);
  // Decrypts into `buf`: > 0 bytes, 0 with *status MT_TLS_WANT_READ (none
  // yet) or MT_TLS_CLOSED (close_notify), or 0 with MT_TLS_FAILED.
  size_t (*conn_read)(MtTlsConn* conn, char* buf, size_t cap, int* status, MtTlsError* err);
  // Encrypts all of `data` into the output queue. MT_TLS_OK or FAILED.
  int (*conn_write)(MtTlsConn* conn, const char* data, size_t len, MtTlsError* err);
  // Sends close_notify (once): MT_TLS_OK once the peer's arrived too,
  // MT_TLS_WANT_READ while it has not, MT_TLS_FAILED.
  int (*conn_shutdown)(MtTlsConn* conn, MtTlsError* err);
  // The output queue: a view of its front, and how much of it was sent.
  const char* (*conn_out_peek)(MtTlsConn* conn, size_t* len);
  void (*conn_out_consume)(MtTlsConn* conn, size_t len);
  size_t (*conn_out_pending)(MtTlsConn* conn);

  // --- what the handshake settled (after MT_TLS_OK) ---
  int (*conn_version)(MtTlsConn* conn);               // Wire version.
  const char* (*conn_version_name)(MtTlsConn* conn);  // "TLSv1.3".
  const char* (*conn_cipher_name)(MtTlsConn* conn);   // The standard name as OpenSSL gives it.
  int (*conn_cipher_bits)(MtTlsConn* conn);
  // Into `out`, NUL-terminated; returns the length (0: none).
  size_t (*conn_alpn)(MtTlsConn* conn, char* out, size_t cap);
  size_t (*conn_server_name)(MtTlsConn* conn, char* out, size_t cap);
  // The peer's certificate chain, leaf first, DER: index past the end gives
  // NULL.
  const uint8_t* (*conn_peer_cert)(MtTlsConn* conn, size_t index, size_t* len);
  // X509_V_OK (0) or why verification failed (with VERIFY_OPTIONAL).
  long (*conn_verify_result)(MtTlsConn* conn);
  int (*conn_session_reused)(MtTlsConn* conn);
  int (*conn_is_server)(MtTlsConn* conn);
  // Ciphers both sides offer (a server, in the ClientHello), ':'-separated
  // "name/version/bits" entries.
  size_t (*conn_shared_ciphers)(MtTlsConn* conn, char* out, size_t cap);
} MtTlsEngine;

// The engine library's one exported symbol.
const MtTlsEngine* mt_tls_engine_v1(void);

#ifdef __cplusplus
}
#endif

#endif  // MT_PYEXT_SRC_NET_TLS_ENGINE_API_H_
