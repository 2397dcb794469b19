#include "control/src/control_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"

namespace mt::control {
namespace {

absl::Status CheckTcpOptions(const TcpOptions& tcp) {
  if (tcp.address.empty()) return absl::InvalidArgumentError("tcp address is empty");
  if (tcp.cert_chain_pem.empty() || tcp.private_key_pem.empty()) {
    return absl::InvalidArgumentError("serving over TCP needs a TLS certificate and key");
  }
  if (tcp.tokens.admin.empty()) {
    return absl::InvalidArgumentError("serving over TCP needs a bearer token");
  }
  if (tcp.tokens.admin == tcp.tokens.read_only) {
    return absl::InvalidArgumentError("the read-only token must differ from the admin token");
  }
  return absl::OkStatus();
}

// "/mt.control.v1.RuntimeControl/GetInfo" and the like: the methods whose
// handlers authorize every call themselves.
std::set<std::string, std::less<>> ServiceMethodPaths() {
  std::set<std::string, std::less<>> paths;
  const google::protobuf::ServiceDescriptor* service =
      v1::GetInfoRequest::descriptor()->file()->FindServiceByName("RuntimeControl");
  for (int i = 0; service != nullptr && i < service->method_count(); ++i) {
    paths.insert(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  return paths;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(const MtAdminAbi* abi,
                                                                    ServerOptions options) {
  if (options.tcp) {
    if (absl::Status s = CheckTcpOptions(*options.tcp); !s.ok()) return s;
  }
  std::unique_ptr<ControlServer> self(new ControlServer());
  auto refusals = std::make_shared<RefusalLog>();
  absl::StatusOr<std::unique_ptr<PeerCredListener>> listener =
      PeerCredListener::Listen(options.socket_path, refusals);
  if (!listener.ok()) return listener.status();
  self->listener_ = *std::move(listener);
  if (options.tcp) {
    self->tokens_ = std::make_unique<BearerTokens>(std::move(options.tcp->tokens));
    self->processor_ = std::make_shared<BearerTokenProcessor>(self->tokens_.get(), refusals,
                                                              ServiceMethodPaths());
  }

  ServiceHooks hooks;
  ControlServer* raw = self.get();
  hooks.set_serving = [raw](bool serving) {
    if (raw->server_ != nullptr) raw->server_->GetHealthCheckService()->SetServingStatus(serving);
  };
  const BearerTokens* tokens = self->tokens_.get();
  PeerCredListener* l = self->listener_.get();
  hooks.role = [tokens](const grpc::ServerContext& c, const char** why) {
    return CallerRole(c, tokens, why);
  };
  hooks.identify = [l, tokens](const grpc::ServerContext& c) {
    return IsTlsCall(c) ? DescribeTlsCaller(c, CallerRole(c, tokens)) : l->Identify(c);
  };
  hooks.refused_connections = [l] { return l->refused(); };
  hooks.refusals = refusals;
  self->limiter_ = std::make_unique<CallLimiter>(options.call_limits);
  hooks.limiter = self->limiter_.get();
  self->service_ = std::make_unique<ControlService>(
      AdminClient(abi), std::move(options.interpreter), std::move(hooks), options.limits);

  grpc::EnableDefaultHealthCheckService(true);
  // gRPC's health service has no descriptor in the protobuf pool; linking
  // ours lets reflection describe it (grpcurl needs that).
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(self->service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(self->limiter_->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, options.handshake_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, options.max_connection_idle_ms);
  grpc::ResourceQuota quota("mt_asyncio_control");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
  if (options.tcp) {
    const TcpOptions& tcp = *options.tcp;
    grpc::SslServerCredentialsOptions ssl(
        tcp.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = tcp.client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({tcp.private_key_pem, tcp.cert_chain_pem});
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(ssl);
    creds->SetAuthMetadataProcessor(self->processor_);
    builder.AddListeningPort(tcp.address, creds, &self->tcp_port_);
  }
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr || (options.tcp && self->tcp_port_ == 0)) {
    // gRPC logs the cause (address in use, a certificate it cannot load).
    self->server_.reset();
    return absl::UnavailableError(
        options.tcp ? absl::StrCat("could not serve on ", options.tcp->address,
                                   " (address in use, or a certificate or key gRPC cannot load)")
                    : std::string("could not start the gRPC server"));
  }
  self->server_->GetHealthCheckService()->SetServingStatus(true);
  self->listener_->Start(self->server_.get());
  return self;
}

void ControlServer::Stop(double grace_seconds) {
  if (!server_) return;
  listener_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(grace_seconds * 1000)));
  server_->Wait();
  server_.reset();
  service_.reset();
  listener_.reset();
  limiter_.reset();
}

}  // namespace mt::control
