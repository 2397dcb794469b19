#include "control/src/tcp_listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

// How often connections are swept (deadlines, connections gRPC closed).
constexpr int kSweepMs = 200;
// After running out of descriptors, the pause before accepting again.
constexpr int kDescriptorBackoffMs = 50;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// "HOST:PORT" or "[V6]:PORT" into its parts.
absl::Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp address must be HOST:PORT or [IPV6]:PORT: ", address));
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(
    const std::string& address, ConnectionLimits limits, std::shared_ptr<RefusalLog> refusals) {
  std::string host, port;
  if (absl::Status s = SplitAddress(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                                 &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", address, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address to bind for ", address));
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      last = absl::UnavailableError(
          absl::StrCat("could not serve on ", address, ": ", std::strerror(errno)));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return last;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  int bound_port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    bound_port = bound.ss_family == AF_INET6
                     ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const absl::Status s = Errno("eventfd");
    close(fd);
    return s;
  }
  return std::unique_ptr<TcpListener>(
      new TcpListener(fd, wake, bound_port, limits, std::move(refusals)));
}

TcpListener::TcpListener(int fd, int wake_fd, int port, ConnectionLimits limits,
                         std::shared_ptr<RefusalLog> refusals)
    : fd_(fd), wake_fd_(wake_fd), port_(port), table_(limits), refusals_(std::move(refusals)) {
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

TcpListener::~TcpListener() {
  Stop();
  close(fd_);
  close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void TcpListener::Start(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  thread_ = std::thread([this, acceptor] { AcceptLoop(acceptor); });
}

void TcpListener::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void TcpListener::Refuse(const std::string& host, const std::string& reason,
                         std::string_view what) {
  refusals_->Record(RefusalKind::kConnection, host, "", reason,
                    absl::StrCat(std::string(what), " a TCP connection from ", host, ": ", reason));
}

void TcpListener::ShedWithoutDescriptors() {
  dropped_without_descriptors_.fetch_add(1, std::memory_order_relaxed);
  if (spare_fd_ >= 0) {
    close(spare_fd_);
    spare_fd_ = -1;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int conn = accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (conn >= 0) {
      std::string host;
      PeerString(&addr, len, &host);
      close(conn);
      Refuse(host.empty() ? "unknown" : host, "the process has run out of file descriptors");
    }
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  // Still none spare: the backlog waits (the kernel holds it) and the
  // loop comes back after the pause.
  poll(nullptr, 0, kDescriptorBackoffMs);
}

void TcpListener::AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    for (const ConnectionTable::Expired& e : table_.Sweep()) {
      Refuse(e.host,
             absl::StrCat("no call with a valid token within ",
                          table_.limits().first_call_deadline.count(), " ms"),
             "closed");
    }
    const int ready = poll(fds, 2, kSweepMs);
    if (ready < 0) {
      if (errno == EINTR) continue;
      std::perror("mt_asyncio control: poll");
      return;
    }
    if (fds[1].revents != 0) return;  // Stop().
    if ((fds[0].revents & POLLIN) == 0) continue;
    // Several at a time, so a burst of connections is not held up by
    // the sweep between them.
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int conn =
          accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          ShedWithoutDescriptors();
        }
        break;  // EAGAIN (nothing waiting), or a peer that already left.
      }
      std::string host;
      std::string peer = PeerString(&addr, len, &host);
      if (peer.empty()) {
        close(conn);
        continue;
      }
      std::string why;
      std::vector<ConnectionTable::Expired> evicted;
      const bool admitted = table_.MayOpen(host, &why, &evicted);
      for (const ConnectionTable::Expired& e : evicted) {
        Refuse(e.host,
               absl::StrCat("the connection cap (", table_.limits().max_connections,
                            ") is full and this was the oldest connection without a valid token"),
               "closed");
      }
      if (!admitted) {
        close(conn);
        Refuse(host, why);
        continue;
      }
      const int watch = fcntl(conn, F_DUPFD_CLOEXEC, 0);
      if (watch < 0) {
        close(conn);
        dropped_without_descriptors_.fetch_add(1, std::memory_order_relaxed);
        Refuse(host, "the process has run out of file descriptors");
        poll(nullptr, 0, kDescriptorBackoffMs);
        break;
      }
      const int one = 1;
      setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      table_.Add(std::move(peer), std::move(host), watch, conn, /*authenticated=*/false);
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
      params.listener_fd = fd_;
      params.fd = conn;  // gRPC owns it from here on (it closes it if stopped).
      acceptor->HandleNewConnection(&params);
    }
  }
}

}  // namespace mt::control
