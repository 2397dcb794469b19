#include "control/src/peer_listener.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/src/thread_priority.h"

namespace mt::control {
namespace {

// How often stalled peers are looked for.
constexpr int kSweepMs = 100;
// The pause after accept4 found no descriptor to spare.
constexpr int kDescriptorBackoffMs = 100;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerCredListener>> PeerCredListener::Listen(
    const std::string& path, std::shared_ptr<RefusalLog> refusals, H2Limits frames,
    std::chrono::milliseconds write_deadline) {
  if (refusals == nullptr) refusals = std::make_shared<RefusalLog>();
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path must be 1 to ", sizeof(addr.sun_path) - 1, " bytes: ", path));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket");
  // bind() creates the file with the socket inode's mode minus the umask:
  // narrowing the inode first gives 0600 (or less) whatever the umask is,
  // with no window where the file is wider and no change to the umask
  // other threads of the process rely on.
  if (fchmod(fd, 0600) != 0) {
    const absl::Status s = Errno("fchmod");
    close(fd);
    return s;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const absl::Status s = Errno("bind " + path);
    close(fd);
    return s;
  }
  if (listen(fd, 64) != 0) {
    const absl::Status s = Errno("listen");
    close(fd);
    unlink(path.c_str());
    return s;
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (wake < 0 || ep < 0) {
    const absl::Status s = Errno("eventfd/epoll");
    close(fd);
    if (wake >= 0) close(wake);
    if (ep >= 0) close(ep);
    unlink(path.c_str());
    return s;
  }
  WatchLoopSockets(ep, fd, wake);
  return std::unique_ptr<PeerCredListener>(new PeerCredListener(
      fd, wake, ep, path, std::move(refusals), frames, write_deadline));
}

PeerCredListener::PeerCredListener(int fd, int wake_fd, int epoll_fd, std::string path,
                                   std::shared_ptr<RefusalLog> refusals, H2Limits frames,
                                   std::chrono::milliseconds write_deadline)
    : fd_(fd),
      wake_fd_(wake_fd),
      epoll_fd_(epoll_fd),
      path_(std::move(path)),
      refusals_(std::move(refusals)),
      frames_(frames),
      write_deadline_(write_deadline) {}

PeerCredListener::~PeerCredListener() {
  Stop();
  close(fd_);
  close(wake_fd_);
  close(epoll_fd_);
}

void PeerCredListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Loop(server); });
}

void PeerCredListener::StopAccepting() {
  // epoll_ctl is safe beside the loop's epoll_wait; an event already
  // taken may still accept once, for a server that is still up.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  unlink(path_.c_str());
}

void PeerCredListener::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  peers_.clear();  // Closes every socket; gRPC sees its ends close.
  unlink(path_.c_str());
}

void PeerCredListener::Accept(grpc::Server* server) {
  // Several at a time, as the TCP listener does.
  for (int i = 0; i < 64; ++i) {
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: back off instead of spinning on the backlog.
        poll(nullptr, 0, kDescriptorBackoffMs);
      }
      return;
    }
    const uid_t own_uid = geteuid();
    ucred cred{};
    socklen_t len = sizeof(cred);
    const bool known = getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
    const int cred_errno = known ? 0 : errno;
    if (!known || (cred.uid != own_uid && cred.uid != 0)) {
      const std::string peer = known ? absl::StrCat("uid=", cred.uid) : "uid=unknown";
      const std::string reason =
          known ? absl::StrCat("uid ", cred.uid, " may not connect (only uid ", own_uid,
                               " and root)")
                : absl::StrCat("SO_PEERCRED: ", std::strerror(cred_errno));
      refusals_->Record(RefusalKind::kConnection, peer, "", reason,
                        absl::StrCat("refused a connection from ", peer, " pid=", cred.pid,
                                     " on the socket: ", reason));
      close(conn);
      continue;
    }
    Serve(server, conn, cred);
  }
}

void PeerCredListener::Serve(grpc::Server* server, int conn, const ucred& cred) {
  const std::string uid = absl::StrCat("uid=", cred.uid);
  const std::string who = absl::StrCat(uid, " pid=", cred.pid);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
    close(conn);
    const std::string reason = "the process has run out of file descriptors";
    refusals_->Record(RefusalKind::kConnection, uid, "", reason,
                      absl::StrCat("refused a connection from ", who, " on the socket: ", reason));
    return;
  }
  const std::uint64_t id = next_id_++;
  Peer& peer = peers_[id];
  peer.relay = std::make_unique<mt::control::Relay>(conn, nullptr, frames_);
  peer.who = who;
  peer.uid = uid;
  peer.relay->Drive();  // No handshake in the clear: ready at once.
  peer.relay->AttachInner(pair[1]);
  epoll_event ev{};
  ev.events = 0;
  ev.data.u64 = 2 * id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn, &ev);
  ev.data.u64 = 2 * id + 1;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pair[1], &ev);
  {
    std::lock_guard<std::mutex> lock(mu_);
    identities_[pair[0]] = who;
  }
  // The server owns its end of the pair from here on.
  grpc::AddInsecureChannelFromFd(server, pair[0]);
  if (peer.relay->Drive() == mt::control::Relay::State::kClosed) {
    Forget(id);
    return;
  }
  peer.relay->Rearm(epoll_fd_, id);
}

void PeerCredListener::Forget(std::uint64_t id) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  const mt::control::Relay& r = *it->second.relay;
  if (!r.why().empty()) {
    refusals_->Record(RefusalKind::kConnection, it->second.uid, "", r.why(),
                      absl::StrCat("closed a connection from ", it->second.who,
                                   " on the socket: ", r.why()));
  }
  peers_.erase(it);  // Closes its sockets (epoll drops closed ones).
}

void PeerCredListener::Sweep() {
  const auto now = mt::control::Relay::Clock::now();
  std::vector<std::pair<std::uint64_t, std::string>> stalled;
  for (const auto& [id, peer] : peers_) {
    if (std::string why = peer.relay->StalledPast(now, write_deadline_); !why.empty()) {
      stalled.emplace_back(id, std::move(why));
    }
  }
  for (auto& [id, why] : stalled) {
    peers_[id].relay->Close(std::move(why));
    Forget(id);
  }
}

void PeerCredListener::Loop(grpc::Server* server) {
  LowerThisThread();
  RunRelayLoop(
      epoll_fd_, std::chrono::milliseconds(kSweepMs), [&] { Accept(server); },
      [this](std::uint64_t id, bool inner, std::uint32_t events) {
        auto it = peers_.find(id);
        if (it == peers_.end()) return;  // Closed earlier in this round.
        mt::control::Relay& relay = *it->second.relay;
        if (relay.OnEvent(inner, events) == mt::control::Relay::State::kClosed) {
          Forget(id);
        } else {
          relay.Rearm(epoll_fd_, id);
        }
      },
      [this] { Sweep(); });
}

std::string PeerCredListener::Identify(const grpc::ServerContext& context) const {
  const std::string peer = context.peer();
  // A channel made from a descriptor names it in its peer string
  // ("fd:12"); the listener remembers who connected on each.
  const std::size_t colon = peer.rfind(':');
  if (colon != std::string::npos) {
    const int fd = std::atoi(peer.c_str() + colon + 1);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = identities_.find(fd);
    if (it != identities_.end()) return it->second;
  }
  return peer;
}

}  // namespace mt::control
