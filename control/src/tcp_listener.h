// The control plane's TCP listener. gRPC's own listener accepts without
// limit, holds a connection that never authenticates for as long as the
// peer likes, and stops accepting for good once the process runs out of
// descriptors (gRPC 1.51 logs `accept4: Too many open files` and never
// retries). So the listening socket is ours: each connection is accepted
// here, checked against the caps of a ConnectionTable, and handed to gRPC
// (which runs the TLS handshake and the token check) through an external
// connection acceptor; connections that make no authenticated call in
// time are shut down; and running out of descriptors costs the
// connections that arrive meanwhile, never the listener.

#ifndef MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_
#define MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_

#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "control/src/connection_table.h"
#include "control/src/refusal_log.h"

namespace mt::control {

class TcpListener {
 public:
  // Binds and listens on `address` ("HOST:PORT", "[V6]:PORT"; port 0
  // picks a free one). Refusals are recorded in `refusals`.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(
      const std::string& address, ConnectionLimits limits, std::shared_ptr<RefusalLog> refusals);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }

  // Starts accepting; connections go to `acceptor` (which must outlive
  // Stop()).
  void Start(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Stops accepting and closes the listening socket. Idempotent.
  void Stop();

  // A call carrying a valid token arrived from `peer` (its peer string).
  void MarkAuthenticated(std::string_view peer) { table_.MarkAuthenticated(peer); }

  int open_connections() const { return table_.open(); }
  // Connections accepted and closed at once for want of a descriptor.
  std::uint64_t dropped_without_descriptors() const {
    return dropped_without_descriptors_.load(std::memory_order_relaxed);
  }

 private:
  TcpListener(int fd, int wake_fd, int port, ConnectionLimits limits,
              std::shared_ptr<RefusalLog> refusals);
  void AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // accept4 failed with EMFILE/ENFILE: takes the waiting connection off
  // the backlog with the spare descriptor and closes it, so the peer
  // hears at once and the listener does not spin.
  void ShedWithoutDescriptors();
  // Counts and logs a connection turned away (`what`: "refused" at
  // accept, "closed" later).
  void Refuse(const std::string& host, const std::string& reason,
              std::string_view what = "refused");

  const int fd_;
  const int wake_fd_;  // An eventfd that ends AcceptLoop.
  const int port_;
  ConnectionTable table_;
  const std::shared_ptr<RefusalLog> refusals_;
  int spare_fd_ = -1;  // /dev/null, kept for ShedWithoutDescriptors.
  std::atomic<std::uint64_t> dropped_without_descriptors_{0};
  std::thread thread_;
  std::mutex mu_;
  bool stopped_ = false;  // Guarded by mu_.
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_
