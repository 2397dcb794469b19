#ifndef MT_CONTROL_SRC_PEER_LISTENER_H_
#define MT_CONTROL_SRC_PEER_LISTENER_H_

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "control/src/h2_inspector.h"
#include "control/src/refusal_log.h"
#include "control/src/relay.h"

namespace mt::control {

// The control plane's Unix-socket listener. gRPC does not tell a handler
// who is on the other end of a Unix socket, so the listener owns the
// socket: it accepts each connection itself, reads the peer's credentials
// (SO_PEERCRED), and serves only connections from this process's own user
// (or root); the others are closed, counted and logged.
//
// A peer it serves is relayed to gRPC over a local socket pair, every
// HTTP/2 frame header read on the way (the same H2Inspector as over TLS),
// and bytes for a peer that does not read wait at most `write_deadline`:
// the socket's peers are trusted with every method, but gRPC 1.51 buffers
// whatever frames a connection sends (measured: a PING flood on the
// socket grew RSS by gigabytes), and a buggy client of the service's own
// user must not cost the service its memory. All of it runs on one
// thread of the listener's own.
class PeerCredListener {
 public:
  // Binds and listens on `path` (which must not exist) with mode 0600,
  // without touching the process's umask. Refused peers, and peers closed
  // for breaking a frame limit or not reading, are recorded in `refusals`
  // (default: a log of its own, on stderr).
  static absl::StatusOr<std::unique_ptr<PeerCredListener>> Listen(
      const std::string& path, std::shared_ptr<RefusalLog> refusals = nullptr,
      H2Limits frames = {}, std::chrono::milliseconds write_deadline = std::chrono::seconds(10));
  ~PeerCredListener();
  PeerCredListener(const PeerCredListener&) = delete;
  PeerCredListener& operator=(const PeerCredListener&) = delete;

  // Starts accepting for `server` (which must outlive Stop()).
  void Start(grpc::Server* server);
  // Stops accepting and removes the socket's file; the connections open
  // are still served. Idempotent.
  void StopAccepting();
  // Stops accepting, closes the socket and every connection, and removes
  // the socket's file. Idempotent.
  void Stop();

  std::uint64_t refused() const { return refusals_->total(RefusalKind::kConnection); }
  // "uid=1000 pid=4242" for a call's peer (best effort: by the channel's
  // fd), or the peer string itself.
  std::string Identify(const grpc::ServerContext& context) const;

 private:
  struct Peer {
    std::unique_ptr<Relay> relay;
    std::string who;  // "uid=1000 pid=4242".
    std::string uid;  // "uid=1000": how refusals count it.
  };

  PeerCredListener(int fd, int wake_fd, int epoll_fd, std::string path,
                   std::shared_ptr<RefusalLog> refusals, H2Limits frames,
                   std::chrono::milliseconds write_deadline);
  void Loop(grpc::Server* server);
  void Accept(grpc::Server* server);
  // Serves an accepted connection of an allowed peer.
  void Serve(grpc::Server* server, int conn, const ucred& cred);
  void Forget(std::uint64_t id);
  // Closes the connections whose peers have not read for write_deadline_.
  void Sweep();

  const int fd_;
  const int wake_fd_;  // An eventfd that ends Loop.
  const int epoll_fd_;
  const std::string path_;
  const std::shared_ptr<RefusalLog> refusals_;
  const H2Limits frames_;
  const std::chrono::milliseconds write_deadline_;
  std::map<std::uint64_t, Peer> peers_;  // The loop's thread only.
  std::uint64_t next_id_ = 1;            // The loop's thread only.
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, std::string> identities_;  // By gRPC's fd; guarded by mu_.
  bool stopped_ = false;                   // Guarded by mu_.
};

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_PEER_LISTENER_H_
