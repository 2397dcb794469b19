#ifndef MT_CONTROL_SRC_CONTROL_SERVER_H_
#define MT_CONTROL_SRC_CONTROL_SERVER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control/src/call_limiter.h"
#include "control/src/connection_table.h"
#include "control/src/control_service.h"
#include "control/src/peer_listener.h"
#include "control/src/h2_inspector.h"
#include "control/src/tcp_listener.h"
#include "control/src/token_auth.h"
#include "runtime/admin/admin_abi.h"

namespace mt::control {

// The TCP listener: TLS always, a bearer token on every call.
struct TcpOptions {
  std::string address;  // "HOST:PORT"; port 0 picks a free one.
  std::string cert_chain_pem;
  std::string private_key_pem;
  // Non-empty: mutual TLS, clients must present a certificate this CA signed.
  std::string client_ca_pem;
  BearerTokens tokens;  // `admin` required; `read_only` optional.
};

// Bounds on what callers can make the server hold.
inline constexpr int kMaxReceiveMessageBytes = 64 * 1024;
inline constexpr int kMaxConcurrentStreamsPerConnection = 16;
inline constexpr int kMaxServerThreads = 48;
inline constexpr int kHandshakeTimeoutMs = 10'000;
// A connection with no call in progress for this long is closed (GOAWAY):
// an idle one, or one that never made a call at all, holds a descriptor
// for nothing. Clients reconnect when they next call.
inline constexpr int kMaxConnectionIdleMs = 60'000;
// The server pings a connection with calls in progress after this long
// without traffic, and closes it when the ping is not answered in time:
// a peer that stopped reading its socket gives up its calls.
inline constexpr int kKeepaliveTimeMs = 30'000;
inline constexpr int kKeepaliveTimeoutMs = 10'000;
// Request metadata (all headers of one call together); ours is a token.
inline constexpr int kMaxMetadataBytes = 16 * 1024;
// gRPC's memory quota for the server's buffers (its transports read less,
// and refuse new streams, as they near it).
inline constexpr std::size_t kMemoryQuotaBytes = 64u << 20;

// The health-only port: plaintext gRPC for probes that carry neither TLS
// nor a token (Kubernetes' grpc probe, grpc-health-probe). Only
// grpc.health.v1 is served there, with tighter bounds than the control
// service's.
inline constexpr int kHealthMaxReceiveMessageBytes = 1024;
inline constexpr int kHealthMaxConcurrentStreams = 4;
inline constexpr int kHealthMaxServerThreads = 4;
inline constexpr int kHealthMaxMetadataBytes = 4 * 1024;
inline constexpr std::size_t kHealthMemoryQuotaBytes = 4u << 20;
// The service name a liveness probe asks for on the health-only port:
// SERVING while the control plane serves, drained or not (the overall
// status "" is the readiness one, NOT_SERVING from Drain on), so a
// drained process is taken out of rotation without being restarted.
inline constexpr char kLivenessService[] = "liveness";

struct ServerOptions {
  std::string socket_path;  // The Unix socket (always served).
  std::optional<TcpOptions> tcp;
  // "HOST:PORT" of the health-only port (port 0 picks a free one), or ""
  // for none.
  std::string health_address;
  v1::InterpreterInfo interpreter;
  ServiceLimits limits;
  CallLimits call_limits;
  // A TCP peer that connects and never finishes the TLS handshake holds a
  // descriptor this long (gRPC's default is 120 s).
  int handshake_timeout_ms = kHandshakeTimeoutMs;
  int max_connection_idle_ms = kMaxConnectionIdleMs;
  // Caps on open TCP connections and their deadlines (the handshake's is
  // handshake_timeout_ms).
  ConnectionLimits connections;
  // What a TLS peer's HTTP/2 frames may do.
  H2Limits frames;
  // The turns and CPU share of the methods that run Python.
  InspectionLimits inspection;
  std::size_t memory_quota_bytes = kMemoryQuotaBytes;
};

// mt.control.v1, grpc.health.v1 and server reflection on the Unix socket
// (peer uid checked) and, when asked, on a TLS port with bearer tokens.
class ControlServer {
 public:
  // `abi` must have passed AdminClient::Check and outlive the server.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(const MtAdminAbi* abi,
                                                              ServerOptions options);
  ~ControlServer() { Stop(0); }
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // The TCP port bound (0 without TCP).
  int tcp_port() const { return tcp_port_; }
  // The health-only port bound (0 without one).
  int health_port() const { return health_port_; }
  // Stops accepting; calls in progress get `grace_seconds`. Idempotent.
  void Stop(double grace_seconds);
  // The service's counters as JSON (ControlService::ControlStatsJson);
  // "" once stopped. Not concurrently with Stop().
  std::string ControlStatsJson() const {
    return service_ != nullptr ? service_->ControlStatsJson() : "";
  }

 private:
  ControlServer() = default;
  absl::Status StartHealthServer(const std::string& address);

  std::unique_ptr<BearerTokens> tokens_;  // Stable address for the processor.
  // Before limiter_, which tells it of every call's end.
  std::unique_ptr<InspectionBudget> inspection_;
  // Before server_: the server's interceptors refer to it until it is gone.
  std::unique_ptr<CallLimiter> limiter_;
  std::unique_ptr<PeerCredListener> listener_;
  std::unique_ptr<TcpListener> tcp_listener_;
  // Hand the TCP listener's connections to the server, one per slot.
  std::vector<std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor>> tcp_acceptors_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::CallbackGenericService> health_only_;  // Before health_server_.
  std::unique_ptr<grpc::Server> health_server_;  // grpc.health.v1 only.
  int tcp_port_ = 0;
  int health_port_ = 0;
};

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_CONTROL_SERVER_H_
