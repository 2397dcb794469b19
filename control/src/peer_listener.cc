#include "control/src/peer_listener.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerCredListener>> PeerCredListener::Listen(
    const std::string& path, std::shared_ptr<RefusalLog> refusals) {
  if (refusals == nullptr) refusals = std::make_shared<RefusalLog>();
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path must be 1 to ", sizeof(addr.sun_path) - 1, " bytes: ", path));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
  if (wake < 0) {
    const absl::Status s = Errno("eventfd");
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return std::unique_ptr<PeerCredListener>(
      new PeerCredListener(fd, wake, path, std::move(refusals)));
}

PeerCredListener::PeerCredListener(int fd, int wake_fd, std::string path,
                                   std::shared_ptr<RefusalLog> refusals)
    : fd_(fd), wake_fd_(wake_fd), path_(std::move(path)), refusals_(std::move(refusals)) {}

PeerCredListener::~PeerCredListener() {
  Stop();
  close(fd_);
  close(wake_fd_);
}

void PeerCredListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
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
  unlink(path_.c_str());
}

void PeerCredListener::AcceptLoop(grpc::Server* server) {
  const uid_t own_uid = geteuid();
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("mt_asyncio control: poll");
      return;
    }
    if (fds[1].revents != 0) return;  // Stop().
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: back off instead of spinning on the backlog.
        poll(nullptr, 0, 100);
      }
      continue;
    }
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      identities_[conn] = absl::StrCat("uid=", cred.uid, " pid=", cred.pid);
    }
    // The server owns the descriptor from here on.
    grpc::AddInsecureChannelFromFd(server, conn);
  }
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
