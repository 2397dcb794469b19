#ifndef MT_CONTROL_SRC_TOKEN_AUTH_H_
#define MT_CONTROL_SRC_TOKEN_AUTH_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace mt::control {

// What a caller may do. Unix-socket callers (their uid checked by the
// listener) are admins; TCP callers get the role of the token they send.
enum class Role { kNone, kReadOnly, kAdmin };

std::string_view RoleName(Role role);

// Whether `given` equals `secret`, in time that depends on the length of
// `secret` only (never on where the first difference is).
bool ConstantTimeEquals(std::string_view given, std::string_view secret);

// The bearer tokens of the TLS listener. `admin` may call everything;
// `read_only` (optional, empty: none) only the methods that change nothing.
struct BearerTokens {
  std::string admin;
  std::string read_only;

  // The role `authorization` metadata ("Bearer <token>") grants: kNone for
  // a missing, malformed or wrong token.
  Role RoleOf(std::string_view authorization) const;
};

// Checks "authorization: Bearer <token>" on every call that arrives over
// the TLS listener, before any handler runs: a missing or wrong token ends
// the call with UNAUTHENTICATED.
//
// It only admits; it records nothing on the auth context, which gRPC
// shares among all the calls of a connection: a role stored there by one
// call would leak to the next. Handlers derive the role per call
// (CallerRole).
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(const BearerTokens* tokens) : tokens_(tokens) {}

  // Cheap and non-blocking: gRPC may run it inline.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

  std::uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }

 private:
  // One stderr line per second at most, with the count since the last.
  void LogRejection(const grpc::AuthContext& context, const char* why);

  const BearerTokens* const tokens_;
  std::atomic<std::uint64_t> rejected_{0};
  std::mutex log_mu_;
  std::chrono::steady_clock::time_point last_log_{};  // Guarded by log_mu_.
  std::uint64_t unlogged_ = 0;                         // Guarded by log_mu_.
};

// Whether a call came over TLS (the TCP listener).
bool IsTlsCall(const grpc::ServerContext& context);

// The role of a call's caller: over TLS, the role of the token the call
// carries (`tokens` null: kNone); over the Unix socket, whose peer's uid
// the listener checked, kAdmin; anything else kNone.
Role CallerRole(const grpc::ServerContext& context, const BearerTokens* tokens);

// "tls role=admin cn=ops peer=ipv4:10.0.0.2:51234" for a TLS caller (cn
// with mutual TLS only).
std::string DescribeTlsCaller(const grpc::ServerContext& context, Role role);

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_TOKEN_AUTH_H_
