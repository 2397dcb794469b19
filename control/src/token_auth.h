#ifndef MT_CONTROL_SRC_TOKEN_AUTH_H_
#define MT_CONTROL_SRC_TOKEN_AUTH_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "control/src/connection_table.h"
#include "control/src/refusal_log.h"

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

  // The role a call's metadata grants; for kNone, `why` (when given) says
  // what was wrong, in words fit for the caller.
  using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;
  Role RoleOfCall(const Metadata& metadata, const char** why = nullptr) const;
};

// Checks "authorization: Bearer <token>" on every call that arrives over
// the TCP listener, before any handler runs: a missing or wrong token ends
// the call with UNAUTHENTICATED.
//
// Except on `handler_checked` methods (the paths of mt.control.v1, whose
// handlers all authorize first): those calls are let through to be
// refused by the handler, which also counts the refusal. Health and
// reflection stay refused here. gRPC tells a processor nothing of the
// connection a call came on, so each acceptor slot of the listener has a
// processor of its own, and `peers` says who holds that slot now.
//
// It only admits; it records nothing on the auth context, which gRPC
// shares among all the calls of a connection: a role stored there by one
// call would leak to the next. Handlers derive the role per call
// (CallerRole).
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  BearerTokenProcessor(const BearerTokens* tokens, std::shared_ptr<RefusalLog> refusals,
                       std::set<std::string, std::less<>> handler_checked = {},
                       const TlsPeers* peers = nullptr, int slot = -1)
      : tokens_(tokens),
        refusals_(std::move(refusals)),
        handler_checked_(std::move(handler_checked)),
        peers_(peers),
        slot_(slot) {}

  // Cheap and non-blocking: gRPC may run it inline.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const BearerTokens* const tokens_;
  const std::shared_ptr<RefusalLog> refusals_;
  const std::set<std::string, std::less<>> handler_checked_;
  const TlsPeers* const peers_;
  const int slot_;
};

// Whether a call came over TLS (on a connection of the TCP listener,
// whose `peers` know it).
bool IsTlsCall(const grpc::ServerContext& context, const TlsPeers* peers);

// The role of a call's caller: over TLS, the role of the token the call
// carries (`tokens` null: kNone; `why`, when given, says what was wrong
// with it); over the Unix socket, whose peer's uid the listener checked,
// kAdmin; anything else kNone.
Role CallerRole(const grpc::ServerContext& context, const BearerTokens* tokens,
                const TlsPeers* peers, const char** why = nullptr);

// "tls role=admin subject=CN=ops peer=ipv4:10.0.0.2:51234" for a TLS
// caller (the subject with mutual TLS only).
std::string DescribeTlsCaller(const grpc::ServerContext& context, Role role,
                              const TlsPeers* peers);

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_TOKEN_AUTH_H_
