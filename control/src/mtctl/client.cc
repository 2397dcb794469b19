#include "control/src/mtctl/client.h"

#include <grpcpp/create_channel_posix.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "control/src/mtctl/discovery.h"
#include "control/src/table.h"
#include "control/src/unix_connect.h"

namespace mt::control::mtctl {
namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "mtctl: cannot read " << path << "\n";
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    default:
      return "gRPC error";
  }
}

}  // namespace

int Client::Connect(bool report) {
  // One deadline for the whole wait: the socket appearing, then the
  // connection being accepted.
  const auto connect_deadline =
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(
          static_cast<long long>(opts_.connect_timeout_seconds * 1000));
  std::string target = opts_.target;
  if (target.empty()) {
    std::vector<std::string> sockets = SocketsInDefaultDir();
    sockets.erase(
        std::remove_if(sockets.begin(), sockets.end(),
                       [](const std::string& p) { return !OwnerAlive(p); }),
        sockets.end());
    if (sockets.size() != 1) {
      std::cerr << "mtctl: no target: pass --target or set MTCTL_TARGET ("
                << sockets.size() << " live sockets in " << DefaultSocketDir()
                << "; 'mtctl list' shows them)\n";
      return kExitUsage;
    }
    target = "unix://" + sockets[0];
  } else if (AllDigits(target)) {
    target = "unix://" + DefaultSocketDir() + "/" + target + ".sock";
  }
  std::string token_file = opts_.token_file;
  if (token_file.empty()) {
    if (const char* env = std::getenv("MTCTL_TOKEN_FILE")) token_file = env;
  }
  grpc::ChannelArguments args;
  if (target.rfind("unix:", 0) == 0) {
    if (!opts_.tls_ca.empty() || !opts_.tls_cert.empty() ||
        !opts_.tls_key.empty() || !opts_.tls_server_name.empty() ||
        !opts_.token_file.empty()) {
      return UsageError(
          "the --tls-* options and --token-file are for HOST:PORT targets");
    }
    const std::string path =
        target.substr(target.rfind("unix://", 0) == 0 ? 7 : 5);
    // A process that is starting has no socket yet: with a connect
    // timeout, wait for it rather than report it missing. Nothing is
    // sent before the kernel says who serves the socket.
    absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path, connect_deadline);
    if (!fd.ok()) {
      foreign_ = absl::IsPermissionDenied(fd.status());
      if (report)
        std::cerr << "mtctl: " << Escape(std::string(fd.status().message()))
                  << "\n";
      return absl::IsNotFound(fd.status()) ? kExitNotFound : kExitFailed;
    }
    // Connected already: the channel has nothing left to wait for.
    channel_ = grpc::CreateCustomInsecureChannelFromFd(target, *fd, args);
  } else {
    // The control plane serves TCP only over TLS, with a token.
    if (opts_.tls_ca.empty())
      return UsageError("a HOST:PORT target needs --tls-ca");
    if (opts_.tls_cert.empty() != opts_.tls_key.empty()) {
      return UsageError("--tls-cert and --tls-key go together");
    }
    if (token_file.empty()) {
      return UsageError(
          "a HOST:PORT target needs --token-file (or $MTCTL_TOKEN_FILE)");
    }
    grpc::SslCredentialsOptions ssl;
    if (!ReadFile(opts_.tls_ca, &ssl.pem_root_certs)) return kExitUsage;
    if (!opts_.tls_cert.empty() &&
        (!ReadFile(opts_.tls_cert, &ssl.pem_cert_chain) ||
         !ReadFile(opts_.tls_key, &ssl.pem_private_key))) {
      return kExitUsage;
    }
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
    if (!opts_.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(opts_.tls_server_name);
    }
    std::string token;
    if (!ReadFile(token_file, &token)) return kExitUsage;
    token_ = std::string(absl::StripAsciiWhitespace(token));
    if (token_.empty())
      return UsageError("the token file " + token_file + " is empty");
    channel_ = grpc::CreateCustomChannel(target, creds, args);
    if (opts_.connect_timeout_seconds > 0 &&
        !channel_->WaitForConnected(connect_deadline)) {
      std::cerr << "mtctl: " << target << " accepted no connection within "
                << opts_.connect_timeout_seconds << " s\n";
      return kExitFailed;
    }
  }
  target_ = target;
  stub_ = v1::RuntimeControl::NewStub(channel_);
  return kExitOk;
}

std::unique_ptr<grpc::ClientContext> Client::Context(bool deadline) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (deadline) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(
                              opts_.timeout_seconds * 1000)));
  }
  if (!token_.empty())
    context->AddMetadata("authorization", "Bearer " + token_);
  return context;
}

int Client::Failed(const grpc::Status& status) const {
  // The message may quote what the process holds (a task name): escaped.
  std::cerr << absl::StrFormat("mtctl: %s: %s (%s)\n", target_,
                               Escape(status.error_message()),
                               CodeName(status.error_code()));
  return status.error_code() == grpc::StatusCode::NOT_FOUND ? kExitNotFound
                                                            : kExitFailed;
}

}  // namespace mt::control::mtctl
