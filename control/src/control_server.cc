#include "control/src/control_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
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
      PeerCredListener::Listen(options.socket_path, refusals, options.frames,
                               options.connections.write_deadline);
  if (!listener.ok()) return listener.status();
  self->listener_ = *std::move(listener);
  if (options.tcp) {
    const TcpOptions& tcp_options = *options.tcp;
    absl::StatusOr<std::unique_ptr<TlsContext>> tls = TlsContext::Create(
        tcp_options.cert_chain_pem, tcp_options.private_key_pem, tcp_options.client_ca_pem);
    if (!tls.ok()) return tls.status();
    options.connections.handshake_deadline =
        std::chrono::milliseconds(options.handshake_timeout_ms);
    absl::StatusOr<std::unique_ptr<TcpListener>> tcp =
        TcpListener::Listen(tcp_options.address, *std::move(tls), options.connections,
                            options.frames, refusals);
    if (!tcp.ok()) return tcp.status();
    self->tcp_listener_ = *std::move(tcp);
    self->tcp_port_ = self->tcp_listener_->port();
    self->tokens_ = std::make_unique<BearerTokens>(std::move(options.tcp->tokens));
  }
  const TlsPeers* peers = self->tcp_listener_ ? &self->tcp_listener_->peers() : nullptr;

  ServiceHooks hooks;
  ControlServer* raw = self.get();
  hooks.set_serving = [raw](bool serving) {
    if (raw->server_ != nullptr) raw->server_->GetHealthCheckService()->SetServingStatus(serving);
    if (raw->health_server_ != nullptr) {
      grpc::HealthCheckServiceInterface* health = raw->health_server_->GetHealthCheckService();
      health->SetServingStatus(serving);  // Every service name, ours included:
      health->SetServingStatus(kLivenessService, true);  // this one stays.
    }
  };
  const BearerTokens* tokens = self->tokens_.get();
  PeerCredListener* l = self->listener_.get();
  hooks.role = [tokens, peers](const grpc::ServerContext& c, const char** why) {
    return CallerRole(c, tokens, peers, why);
  };
  hooks.identify = [l, tokens, peers](const grpc::ServerContext& c) {
    return IsTlsCall(c, peers) ? DescribeTlsCaller(c, CallerRole(c, tokens, peers), peers)
                               : l->Identify(c);
  };
  hooks.tls_peer = [peers](const grpc::ServerContext& c) -> std::optional<TlsPeer> {
    return peers != nullptr ? peers->ByGrpcPeer(c.peer()) : std::nullopt;
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
  self->inspection_ = std::make_unique<InspectionBudget>(options.inspection);
  hooks.inspection = self->inspection_.get();
  // What a call held (its answer, buffered for a client that may never
  // have read it) is freed as it ends: give it back to the system once
  // the control plane is quiet.
  InspectionBudget* inspection = self->inspection_.get();
  self->limiter_ = std::make_unique<CallLimiter>(options.call_limits, std::move(observer),
                                                 [inspection] { inspection->RequestTrim(); });
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
  quota.Resize(options.memory_quota_bytes);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
  if (self->tcp_listener_ != nullptr) {
    // The listener terminates TLS and hands gRPC each connection's
    // plaintext over a local socket pair: local credentials, and the
    // token check on every call. One acceptor (and processor) per
    // connection slot, so a refusal there can name the peer: gRPC tells
    // the processor nothing of the connection.
    const std::set<std::string, std::less<>> handler_checked = ServiceMethodPaths();
    for (int slot = 0; slot < self->tcp_listener_->slots(); ++slot) {
      std::shared_ptr<grpc::ServerCredentials> creds =
          grpc::experimental::LocalServerCredentials(UDS);
      creds->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(
          self->tokens_.get(), refusals, handler_checked, peers, slot));
      self->tcp_acceptors_.push_back(builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, creds));
    }
  }
  if (!options.health_address.empty()) {
    // First: a port that cannot be had fails the start before anything
    // else serves.
    if (absl::Status s = self->StartHealthServer(options.health_address); !s.ok()) return s;
  }
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr) {
    // gRPC logs the cause. The addresses are bound and the certificates
    // checked already, so this is rare.
    return absl::UnavailableError("could not start the gRPC server");
  }
  self->server_->GetHealthCheckService()->SetServingStatus(true);
  self->listener_->Start(self->server_.get());
  if (self->tcp_listener_ != nullptr) {
    std::vector<grpc::experimental::ExternalConnectionAcceptor*> acceptors;
    for (auto& a : self->tcp_acceptors_) acceptors.push_back(a.get());
    self->tcp_listener_->Start(std::move(acceptors));
  }
  return self;
}

namespace {

// Leaves a server builder no plugins: the reflection plugin, which gRPC
// adds to every builder once it is initialized, would describe the
// control service's messages on the health-only port.
class NoPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

// Every method but grpc.health.v1's on the health-only port. (A server
// needs a registered service before gRPC adds its health one; this one
// answers what a client asks of anything else.)
class HealthOnly final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Refusal final : public grpc::ServerGenericBidiReactor {
     public:
      Refusal() {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            "only grpc.health.v1 is served on this port"));
      }
      void OnDone() override { delete this; }
    };
    return new Refusal;
  }
};

}  // namespace

absl::Status ControlServer::StartHealthServer(const std::string& address) {
  grpc::ServerBuilder builder;
  // gRPC's default health service and HealthOnly: nothing else is there.
  health_only_ = std::make_unique<HealthOnly>();
  builder.RegisterCallbackGenericService(health_only_.get());
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &health_port_);
  builder.SetOption(std::make_unique<NoPlugins>());
  // gRPC binds with SO_REUSEPORT by default: a second process given the
  // same port would share it, and probes would ask either one.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kHealthMaxReceiveMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kHealthMaxConcurrentStreams);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kMaxConnectionIdleMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kHealthMaxMetadataBytes);
  grpc::ResourceQuota quota("mt_asyncio_health");
  quota.SetMaxThreads(kHealthMaxServerThreads);
  quota.Resize(kHealthMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 1);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    health_server_.reset();
    return absl::UnavailableError("could not serve the health port on " + address +
                                  " (address in use or not this host's?)");
  }
  health_server_->GetHealthCheckService()->SetServingStatus(true);
  health_server_->GetHealthCheckService()->SetServingStatus(kLivenessService, true);
  return absl::OkStatus();
}

void ControlServer::Stop(double grace_seconds) {
  if (health_server_ != nullptr) {
    // Probes get no grace: the process is going.
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
    health_server_.reset();
    health_only_.reset();
  }
  if (!server_) return;
  // No new connections; those open keep their relays while calls in
  // progress have their grace (a Shutdown stream says STOPPED), then go.
  listener_->StopAccepting();
  if (tcp_listener_ != nullptr) tcp_listener_->StopAccepting();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(grace_seconds * 1000)));
  server_->Wait();
  listener_->Stop();
  if (tcp_listener_ != nullptr) tcp_listener_->Stop();
  server_.reset();
  service_.reset();
  listener_.reset();
  tcp_listener_.reset();
  tcp_acceptors_.clear();
  limiter_.reset();
  // Its thread goes now, with its interpreter thread state, while the
  // interpreter is certainly still there.
  inspection_.reset();
}

}  // namespace mt::control
