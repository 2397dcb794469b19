#include "control/src/unix_connect.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace mt::control {

absl::StatusOr<int> ConnectTrustedUnixSocket(const std::string& path,
                                             std::chrono::system_clock::time_point deadline) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a Unix socket path (at most %d bytes)", path,
                        static_cast<int>(sizeof(address.sun_path) - 1)));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  int last_errno = 0;
  while (true) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrFormat("socket(): %s", std::strerror(errno)));
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
      ucred peer{};
      socklen_t size = sizeof(peer);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
        const int saved = errno;
        close(fd);
        return absl::UnavailableError(
            absl::StrFormat("%s: SO_PEERCRED: %s", path, std::strerror(saved)));
      }
      if (!TrustedPeerUid(peer.uid, geteuid())) {
        close(fd);
        return absl::PermissionDeniedError(absl::StrFormat(
            "%s is served by uid %d (pid %d), not by this user or root: nothing was sent",
            path, static_cast<int>(peer.uid), static_cast<int>(peer.pid)));
      }
      return fd;
    }
    last_errno = errno;
    close(fd);
    // No socket yet, nobody listening yet, or a full backlog: wait for
    // the process; anything else (EACCES, ENOTSOCK) will not change.
    const bool transient =
        last_errno == ENOENT || last_errno == ECONNREFUSED || last_errno == EAGAIN;
    if (!transient || std::chrono::system_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (last_errno == ENOENT) {
    return absl::NotFoundError(absl::StrFormat("no control socket at %s", path));
  }
  return absl::UnavailableError(
      absl::StrFormat("%s accepted no connection: %s", path, std::strerror(last_errno)));
}

}  // namespace mt::control
