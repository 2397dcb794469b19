// The control plane's TCP listener: TLS, caps and HTTP/2 limits in front
// of gRPC.
//
// gRPC 1.51's own listener accepts without limit, keeps a connection that
// never authenticates as long as the peer likes, stops accepting for good
// once the process runs out of descriptors (`accept4: Too many open
// files`), and buffers whatever HTTP/2 frames a peer sends before any call
// (see h2_inspector.h). So the listening socket is ours, and so is TLS:
// each connection is accepted here and checked against the caps of a
// ConnectionTable, its TLS handshake runs here (OpenSSL, the library
// gRPC itself uses), and its plaintext goes to gRPC over a local socket
// pair, frame headers inspected on the way, through one of gRPC's
// external connection acceptors (local credentials; the bearer-token check
// stays gRPC's auth metadata processor, one per acceptor slot so it can
// name the peer). Connections past a deadline are closed; running out of
// descriptors costs the connections that arrive meanwhile, never the
// listener. All of it runs on one thread of the listener's own.

#ifndef MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_
#define MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_

#include <grpcpp/server_builder.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "control/src/connection_table.h"
#include "control/src/h2_inspector.h"
#include "control/src/refusal_log.h"
#include "control/src/relay.h"
#include "control/src/tls_context.h"

namespace mt::control {

class TcpListener {
 public:
  // Binds and listens on `address` ("HOST:PORT", "[V6]:PORT"; port 0
  // picks a free one). Refusals are recorded in `refusals`.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(
      const std::string& address, std::unique_ptr<TlsContext> tls, ConnectionLimits limits,
      H2Limits frames, std::shared_ptr<RefusalLog> refusals);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  // How many acceptors Start needs: one per connection slot.
  int slots() const { return table_.limits().max_connections; }

  // Starts accepting; connection slot i goes to gRPC through
  // `acceptors[i]` (which must outlive Stop()).
  void Start(std::vector<grpc::experimental::ExternalConnectionAcceptor*> acceptors);
  // Stops accepting; the connections open are still served. Idempotent.
  void StopAccepting();
  // Stops accepting and closes every connection. Idempotent.
  void Stop();

  // Who is behind the connections gRPC serves.
  const TlsPeers& peers() const { return table_; }
  // A call carrying a valid token arrived on `grpc_peer`'s connection.
  void MarkAuthenticated(std::string_view grpc_peer) { table_.MarkAuthenticated(grpc_peer); }

  int open_connections() const { return table_.open(); }
  // Connections closed for passing an HTTP/2 limit.
  std::uint64_t frame_limit_closes() const {
    return frame_limit_closes_.load(std::memory_order_relaxed);
  }

 private:
  TcpListener(int fd, int wake_fd, int epoll_fd, int port, std::unique_ptr<TlsContext> tls,
              ConnectionLimits limits, H2Limits frames, std::shared_ptr<RefusalLog> refusals);

  struct Served {
    std::unique_ptr<Relay> conn;
    int slot = -1;
    std::string host;  // The peer's address without its port.
  };

  void Loop();
  void AcceptSome();
  // accept4 failed with EMFILE/ENFILE: takes the waiting connection off
  // the backlog with a spare descriptor and closes it, so the peer hears
  // at once and the listener does not spin. Two spares: another thread
  // may take the slot one frees before accept4 does (gRPC's threads make
  // descriptors too); a spare that could not be reopened is reclaimed on
  // a later call, once descriptors are back. The shed connection's slot
  // becomes the spare again without ever being free.
  void ShedWithoutDescriptors();
  // Brings everything up to date after a connection was driven to
  // `state`: hands it to gRPC once its handshake is done, re-arms its
  // sockets, or forgets it once closed.
  void Drive(ConnectionTable::Id id, Served& s, Relay::State state);
  void HandOver(ConnectionTable::Id id, Served& s);
  void Forget(ConnectionTable::Id id);
  void Sweep();
  // Counts and logs a connection turned away (`what`: "refused" at
  // accept, "closed" later).
  void Refuse(const std::string& host, const std::string& subject, const std::string& reason,
              std::string_view what);

  const int fd_;
  const int wake_fd_;   // An eventfd that ends Loop.
  const int epoll_fd_;
  const int port_;
  const std::unique_ptr<TlsContext> tls_;
  const H2Limits frames_;
  ConnectionTable table_;
  const std::shared_ptr<RefusalLog> refusals_;
  std::vector<grpc::experimental::ExternalConnectionAcceptor*> acceptors_;
  std::map<ConnectionTable::Id, Served> served_;  // The loop's thread only.
  // The abstract socket names of handed-over connections start with it:
  // the process ID and a random part (HandOver says why).
  std::string name_prefix_;
  // /dev/null, kept for ShedWithoutDescriptors; -1 while not held.
  std::array<int, 2> spare_fds_{-1, -1};
  std::atomic<std::uint64_t> frame_limit_closes_{0};
  std::thread thread_;
  std::mutex mu_;
  bool stopped_ = false;  // Guarded by mu_.
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_TCP_LISTENER_H_
