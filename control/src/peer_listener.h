#ifndef MT_CONTROL_SRC_PEER_LISTENER_H_
#define MT_CONTROL_SRC_PEER_LISTENER_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "control/src/refusal_log.h"

namespace mt::control {

// The control plane's Unix-socket listener. gRPC does not tell a handler
// who is on the other end of a Unix socket, so the listener owns the
// socket: it accepts each connection itself, reads the peer's credentials
// (SO_PEERCRED), and hands only connections from this process's own user
// (or root) to the gRPC server; the others are closed, counted and logged.
class PeerCredListener {
 public:
  // Binds and listens on `path` (which must not exist) with mode 0600,
  // without touching the process's umask. Refused peers are recorded in
  // `refusals` (default: a log of its own, on stderr).
  static absl::StatusOr<std::unique_ptr<PeerCredListener>> Listen(
      const std::string& path, std::shared_ptr<RefusalLog> refusals = nullptr);
  ~PeerCredListener();
  PeerCredListener(const PeerCredListener&) = delete;
  PeerCredListener& operator=(const PeerCredListener&) = delete;

  // Starts accepting for `server` (which must outlive Stop()).
  void Start(grpc::Server* server);
  // Stops accepting, closes the socket and removes its file. Idempotent.
  void Stop();

  std::uint64_t refused() const { return refusals_->total(RefusalKind::kConnection); }
  // "uid=1000 pid=4242" for a call's peer (best effort: by the channel's
  // fd), or the peer string itself.
  std::string Identify(const grpc::ServerContext& context) const;

 private:
  PeerCredListener(int fd, int wake_fd, std::string path, std::shared_ptr<RefusalLog> refusals);
  void AcceptLoop(grpc::Server* server);

  const int fd_;
  const int wake_fd_;  // An eventfd that ends AcceptLoop.
  const std::string path_;
  const std::shared_ptr<RefusalLog> refusals_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, std::string> identities_;  // By accepted fd; guarded by mu_.
  bool stopped_ = false;                   // Guarded by mu_.
};

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_PEER_LISTENER_H_
