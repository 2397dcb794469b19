#include "control/src/token_auth.h"

#include <grpc/grpc_security_constants.h>

#include <cstdio>

#include <cctype>

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

// " cn=<name>" for each common name of the client's certificate (mutual
// TLS), or "".
std::string CommonNames(const grpc::AuthContext& context) {
  std::string out;
  for (const grpc::string_ref& cn : context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    out += " cn=" + std::string(View(cn));
  }
  return out;
}

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

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext* context, OutputMetadata*,
                                           OutputMetadata*) {
  const auto range = auth_metadata.equal_range("authorization");
  const char* why = nullptr;
  if (range.first == range.second) {
    why = "no bearer token (metadata 'authorization: Bearer <token>')";
  } else if (std::next(range.first) != range.second) {
    why = "more than one authorization header";
  } else if (tokens_->RoleOf(View(range.first->second)) == Role::kNone) {
    why = "wrong bearer token";
  }
  if (why == nullptr) return grpc::Status::OK;
  rejected_.fetch_add(1, std::memory_order_relaxed);
  LogRejection(*context, why);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
}

void BearerTokenProcessor::LogRejection(const grpc::AuthContext& context, const char* why) {
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t count;
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    ++unlogged_;
    if (now - last_log_ < std::chrono::seconds(1)) return;
    last_log_ = now;
    count = unlogged_;
    unlogged_ = 0;
  }
  const std::string who = CommonNames(context);
  std::fprintf(stderr,
               "mt_asyncio control: UNAUTHENTICATED over TLS%s: %s (%llu since the last line)\n",
               who.c_str(), why, static_cast<unsigned long long>(count));
}

bool IsTlsCall(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return false;
  for (const grpc::string_ref& type :
       auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)) {
    if (View(type) == GRPC_SSL_TRANSPORT_SECURITY_TYPE) return true;
  }
  return false;
}

Role CallerRole(const grpc::ServerContext& context, const BearerTokens* tokens) {
  if (IsTlsCall(context)) {
    if (tokens == nullptr) return Role::kNone;
    const auto& metadata = context.client_metadata();
    const auto range = metadata.equal_range("authorization");
    if (range.first == range.second || std::next(range.first) != range.second) {
      return Role::kNone;
    }
    return tokens->RoleOf(View(range.first->second));
  }
  // The listener names the channels it hands over "fd:N"; nothing else
  // reaches this server without TLS.
  return context.peer().rfind("fd:", 0) == 0 ? Role::kAdmin : Role::kNone;
}

std::string DescribeTlsCaller(const grpc::ServerContext& context, Role role) {
  std::string out = "tls role=" + std::string(RoleName(role));
  if (const auto auth = context.auth_context(); auth != nullptr) out += CommonNames(*auth);
  out += " peer=" + context.peer();
  return out;
}

}  // namespace mt::control
