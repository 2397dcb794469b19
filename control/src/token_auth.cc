#include "control/src/token_auth.h"

#include <grpc/grpc_security_constants.h>

#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

constexpr std::string_view kBearer = "bearer ";

// The token of "Bearer <token>" (scheme case-insensitive, RFC 6750), or
// "" when the value has another form.
std::string_view BearerToken(std::string_view authorization) {
  if (authorization.size() <= kBearer.size()) return {};
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return {};
  }
  std::string_view token = authorization.substr(kBearer.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

std::string_view View(const grpc::string_ref& s) { return {s.data(), s.size()}; }


}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kReadOnly:
      return "read-only";
    case Role::kNone:
      break;
  }
  return "none";
}

bool ConstantTimeEquals(std::string_view given, std::string_view secret) {
  // Every byte of the secret is visited whatever `given` holds; the
  // accumulator is volatile so the loop cannot be cut short.
  volatile unsigned char diff = given.size() != secret.size() ? 1 : 0;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

Role BearerTokens::RoleOf(std::string_view authorization) const {
  const std::string_view token = BearerToken(authorization);
  if (token.empty()) return Role::kNone;
  // Both comparisons always run: which token matched takes no less time.
  const bool is_admin = !admin.empty() && ConstantTimeEquals(token, admin);
  const bool is_read_only = !read_only.empty() && ConstantTimeEquals(token, read_only);
  if (is_admin) return Role::kAdmin;
  if (is_read_only) return Role::kReadOnly;
  return Role::kNone;
}

Role BearerTokens::RoleOfCall(const Metadata& metadata, const char** why) const {
  const char* problem = nullptr;
  Role role = Role::kNone;
  const auto range = metadata.equal_range("authorization");
  if (range.first == range.second) {
    problem = "no bearer token (metadata 'authorization: Bearer <token>')";
  } else if (std::next(range.first) != range.second) {
    problem = "more than one authorization header";
  } else {
    role = RoleOf(View(range.first->second));
    if (role == Role::kNone) problem = "wrong bearer token";
  }
  if (why != nullptr) *why = problem;
  return role;
}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext*, OutputMetadata*,
                                           OutputMetadata*) {
  const char* why = nullptr;
  if (tokens_->RoleOfCall(auth_metadata, &why) != Role::kNone) return grpc::Status::OK;
  const auto path = auth_metadata.find(":path");
  const std::string_view method = path == auth_metadata.end() ? "" : View(path->second);
  if (!method.empty() && handler_checked_.count(method) > 0) {
    return grpc::Status::OK;  // Its handler refuses it and counts it.
  }
  const std::optional<TlsPeer> peer =
      peers_ != nullptr ? peers_->BySlot(slot_) : std::optional<TlsPeer>();
  const std::string address = peer ? peer->address : std::string("unknown");
  const std::string subject = peer ? peer->subject : std::string();
  refusals_->Record(RefusalKind::kUnauthenticated, PeerAddress(address), subject, why,
                    absl::StrCat("tls role=none", subject.empty() ? "" : " subject=", subject,
                                 " peer=", address, ": ", std::string(method),
                                 " -> UNAUTHENTICATED (", why, ")"));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
}

bool IsTlsCall(const grpc::ServerContext& context, const TlsPeers* peers) {
  return peers != nullptr && peers->ByGrpcPeer(context.peer()).has_value();
}

Role CallerRole(const grpc::ServerContext& context, const BearerTokens* tokens,
                const TlsPeers* peers, const char** why) {
  if (IsTlsCall(context, peers)) {
    return tokens == nullptr ? Role::kNone : tokens->RoleOfCall(context.client_metadata(), why);
  }
  // The Unix listener names the channels it hands over "fd:N"; the TCP
  // listener's are known to `peers`; nothing else reaches this server.
  return context.peer().rfind("fd:", 0) == 0 ? Role::kAdmin : Role::kNone;
}

std::string DescribeTlsCaller(const grpc::ServerContext& context, Role role,
                              const TlsPeers* peers) {
  std::string out = "tls role=" + std::string(RoleName(role));
  const std::optional<TlsPeer> peer =
      peers != nullptr ? peers->ByGrpcPeer(context.peer()) : std::optional<TlsPeer>();
  if (peer && !peer->subject.empty()) out += " subject=" + peer->subject;
  out += " peer=" + (peer ? peer->address : context.peer());
  return out;
}

}  // namespace mt::control
