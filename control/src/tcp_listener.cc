#include "control/src/tcp_listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/src/thread_priority.h"

namespace mt::control {
namespace {

// How often deadlines are checked.
constexpr int kSweepMs = 100;
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
    const std::string& address, std::unique_ptr<TlsContext> tls, ConnectionLimits limits,
    H2Limits frames, std::shared_ptr<RefusalLog> refusals) {
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
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (wake < 0 || ep < 0) {
    const absl::Status s = Errno("eventfd/epoll");
    close(fd);
    if (wake >= 0) close(wake);
    if (ep >= 0) close(ep);
    return s;
  }
  WatchLoopSockets(ep, fd, wake);
  return std::unique_ptr<TcpListener>(new TcpListener(fd, wake, ep, bound_port, std::move(tls),
                                                      limits, frames, std::move(refusals)));
}

TcpListener::TcpListener(int fd, int wake_fd, int epoll_fd, int port,
                         std::unique_ptr<TlsContext> tls, ConnectionLimits limits,
                         H2Limits frames, std::shared_ptr<RefusalLog> refusals)
    : fd_(fd),
      wake_fd_(wake_fd),
      epoll_fd_(epoll_fd),
      port_(port),
      tls_(std::move(tls)),
      frames_(frames),
      table_(limits),
      refusals_(std::move(refusals)) {
  for (int& spare : spare_fds_) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::random_device random;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(random()) << 32) | random();
  name_prefix_ = absl::StrCat("mt_asyncio-control-", getpid(), "-", absl::Hex(nonce));
}

TcpListener::~TcpListener() {
  Stop();
  served_.clear();
  close(fd_);
  close(wake_fd_);
  close(epoll_fd_);
  for (int spare : spare_fds_) {
    if (spare >= 0) close(spare);
  }
}

void TcpListener::Start(std::vector<grpc::experimental::ExternalConnectionAcceptor*> acceptors) {
  acceptors_ = std::move(acceptors);
  thread_ = std::thread([this] { Loop(); });
}

void TcpListener::StopAccepting() {
  // epoll_ctl is safe beside the loop's epoll_wait.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
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
  for (auto& [id, s] : served_) table_.Close(id);
  served_.clear();  // Closes every socket; gRPC sees its ends close.
}

void TcpListener::Refuse(const std::string& host, const std::string& subject,
                         const std::string& reason, std::string_view what) {
  refusals_->Record(RefusalKind::kConnection, host, subject, reason,
                    absl::StrCat(std::string(what), " a TCP connection from ", host,
                                 subject.empty() ? "" : " subject=", subject, ": ", reason));
}

void TcpListener::ShedWithoutDescriptors() {
  for (int& spare : spare_fds_) {
    if (spare < 0) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  for (int& spare : spare_fds_) {
    if (spare < 0) continue;
    close(spare);
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int conn = accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    const int err = errno;
    if (conn < 0) {
      spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
      // Another thread took the slot this spare freed: try with the next.
      if (err == EMFILE || err == ENFILE) continue;
      break;  // The peer left before it was taken.
    }
    std::string host;
    PeerString(&addr, len, &host);
    // dup3 over the connection closes it and keeps its slot in one step:
    // close, then open, would let another thread take the slot between
    // them, and the next connection would wait in the backlog. Any open
    // file will do as the spare; the wake eventfd is one.
    spare = dup3(wake_fd_, conn, O_CLOEXEC);
    if (spare < 0) close(conn);
    Refuse(host.empty() ? "unknown" : host, "", "the process has run out of file descriptors",
           "refused");
    break;
  }
  // None spare, or a connection shed: the rest of the backlog waits (the
  // kernel holds it) and the loop comes back after the pause.
  poll(nullptr, 0, kDescriptorBackoffMs);
}

void TcpListener::AcceptSome() {
  // Several at a time, so a burst of connections is not held up by the
  // connections' own work between them.
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int conn =
        accept4(fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ShedWithoutDescriptors();
      }
      return;  // EAGAIN (nothing waiting), or a peer that already left.
    }
    std::string host;
    std::string address = PeerString(&addr, len, &host);
    if (address.empty()) {
      close(conn);
      continue;
    }
    ConnectionTable::Admission admission = table_.Open(address, host);
    for (ConnectionTable::Id evicted : admission.evicted) {
      auto it = served_.find(evicted);
      if (it == served_.end()) continue;
      Refuse(it->second.host, it->second.conn->handshaken() ? it->second.conn->subject() : "",
             absl::StrCat("the connection cap (", table_.limits().max_connections,
                          ") is full and this was the oldest connection without a valid token"),
             "closed");
      served_.erase(it);
    }
    if (!admission.admitted()) {
      close(conn);
      Refuse(host, "", admission.why, "refused");
      continue;
    }
    SSL* ssl = tls_->NewSession(conn);
    if (ssl == nullptr) {
      close(conn);
      table_.Close(admission.id);
      Refuse(host, "", "no memory for a TLS session", "refused");
      continue;
    }
    const int one = 1;
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Served& s = served_[admission.id];
    s.conn = std::make_unique<Relay>(conn, ssl, frames_);
    s.slot = admission.slot;
    s.host = host;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 2 * admission.id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn, &ev);
  }
}

void TcpListener::HandOver(ConnectionTable::Id id, Served& s) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
    s.conn->Close("the process has run out of file descriptors");
    return;
  }
  // gRPC names a connection by its peer's socket address: ours gets a
  // name (in the abstract namespace, nothing on disk; a socket that does
  // not listen cannot be connected to) that the table maps back to the
  // connection. The namespace is the network namespace's, which processes
  // with their own process IDs share (containers of one pod, each its
  // pid 1; sandboxed test runs): the listener's random prefix keeps their
  // names apart.
  const std::string name = absl::StrCat(name_prefix_, "-", id);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(pair[1], reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close(pair[0]);
    close(pair[1]);
    s.conn->Close(absl::StrCat("cannot name the local socket: ", std::strerror(errno)));
    return;
  }
  table_.HandedOver(id, "unix-abstract:" + name, s.conn->subject());
  s.conn->AttachInner(pair[1]);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 2 * id + 1;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pair[1], &ev);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
  params.fd = pair[0];  // gRPC owns it from here on (and closes it if stopped).
  acceptors_[static_cast<std::size_t>(s.slot)]->HandleNewConnection(&params);
}

void TcpListener::Forget(ConnectionTable::Id id) {
  auto it = served_.find(id);
  if (it == served_.end()) return;
  const Relay& c = *it->second.conn;
  if (c.broke_limit()) frame_limit_closes_.fetch_add(1, std::memory_order_relaxed);
  if (!c.why().empty()) {
    Refuse(it->second.host, c.handshaken() ? c.subject() : "", c.why(), "closed");
  }
  table_.Close(id);
  served_.erase(it);  // Closes its sockets (epoll drops closed ones).
}

void TcpListener::Drive(ConnectionTable::Id id, Served& s, Relay::State state) {
  if (state == Relay::State::kHandshakeDone) {
    HandOver(id, s);
    state = s.conn->Drive();
  }
  if (state == Relay::State::kClosed) {
    Forget(id);
    return;
  }
  s.conn->Rearm(epoll_fd_, id);
}

void TcpListener::Sweep() {
  const auto now = Relay::Clock::now();
  const ConnectionLimits& limits = table_.limits();
  std::vector<std::pair<ConnectionTable::Id, std::string>> ending;
  for (auto& [id, s] : served_) {
    const Relay& c = *s.conn;
    if (!c.handshaken() && now - c.accepted_at >= limits.handshake_deadline) {
      ending.emplace_back(id, absl::StrCat("no TLS handshake within ",
                                           limits.handshake_deadline.count(), " ms"));
    } else if (std::string why = c.StalledPast(now, limits.write_deadline); !why.empty()) {
      ending.emplace_back(id, std::move(why));
    }
  }
  for (ConnectionTable::Id id : table_.Overdue(now)) {
    ending.emplace_back(id, absl::StrCat("no call with a valid token within ",
                                         limits.first_call_deadline.count(), " ms"));
  }
  for (auto& [id, why] : ending) {
    auto it = served_.find(id);
    if (it == served_.end()) continue;
    it->second.conn->Close(std::move(why));
    Forget(id);
  }
}

void TcpListener::Loop() {
  LowerThisThread();
  RunRelayLoop(
      epoll_fd_, std::chrono::milliseconds(kSweepMs), [this] { AcceptSome(); },
      [this](std::uint64_t id, bool inner, std::uint32_t events) {
        auto it = served_.find(id);
        if (it == served_.end()) return;  // Closed earlier in this round.
        Drive(id, it->second, it->second.conn->OnEvent(inner, events));
      },
      [this] { Sweep(); });
}

}  // namespace mt::control
