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
#include "control/src/tls_check.h"
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
  return CheckServerTls(tcp.cert_chain_pem, tcp.private_key_pem, tcp.client_ca_pem);
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
    absl::StatusOr<std::unique_ptr<TcpListener>> tcp =
        TcpListener::Listen(options.tcp->address, options.connections, refusals);
    if (!tcp.ok()) return tcp.status();
    self->tcp_listener_ = *std::move(tcp);
    self->tcp_port_ = self->tcp_listener_->port();
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
  TcpListener* tcp_listener = self->tcp_listener_.get();
  hooks.open_connections = [tcp_listener] {
    return tcp_listener != nullptr ? tcp_listener->open_connections() : 0;
  };
  // A call over TCP that carries a valid token (whatever its method)
  // lifts its connection's first-call deadline.
  CallLimiter::CallObserver observer;
  if (tcp_listener != nullptr) {
    observer = [tokens, tcp_listener](const grpc::ServerContextBase& c) {
      if (tokens->RoleOfCall(c.client_metadata()) != Role::kNone) {
        tcp_listener->MarkAuthenticated(c.peer());
      }
    };
  }
  self->limiter_ = std::make_unique<CallLimiter>(options.call_limits, std::move(observer));
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
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
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
    // The listening socket is the TcpListener's; gRPC runs the handshake
    // and the token check on each connection it hands over.
    self->tcp_acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds);
  }
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr) {
    // gRPC logs the cause. The addresses are bound and the certificates
    // checked already, so this is rare.
    return absl::UnavailableError("could not start the gRPC server");
  }
  self->server_->GetHealthCheckService()->SetServingStatus(true);
  self->listener_->Start(self->server_.get());
  if (self->tcp_listener_ != nullptr) self->tcp_listener_->Start(self->tcp_acceptor_.get());
  return self;
}

void ControlServer::Stop(double grace_seconds) {
  if (!server_) return;
  listener_->Stop();
  if (tcp_listener_ != nullptr) tcp_listener_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(grace_seconds * 1000)));
  server_->Wait();
  server_.reset();
  service_.reset();
  listener_.reset();
  tcp_listener_.reset();
  tcp_acceptor_.reset();
  limiter_.reset();
}

}  // namespace mt::control
