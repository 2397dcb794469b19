#include "control/src/relay.h"

#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "control/src/tls_context.h"

namespace mt::control {
namespace {

// One TLS record's worth: the unit SSL_read and SSL_write work in.
constexpr std::size_t kChunk = 16 * 1024;

}  // namespace

Relay::Relay(int fd, SSL* ssl, H2Limits limits, Clock::time_point now)
    : accepted_at(now), fd_(fd), ssl_(ssl), inspector_(limits, now) {}

Relay::~Relay() {
  SSL_free(ssl_);
  close(fd_);
  if (inner_ >= 0) close(inner_);
}

void Relay::Fail(std::string why) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  why_ = std::move(why);
  ERR_clear_error();
}

void Relay::Close(std::string why) { Fail(std::move(why)); }

std::string Relay::subject() const {
  return ssl_ != nullptr ? TlsContext::PeerSubject(ssl_) : std::string();
}

std::string Relay::StalledPast(Clock::time_point now,
                               std::chrono::milliseconds deadline) const {
  if (stalled_since_ == Clock::time_point{} || now - stalled_since_ < deadline) return "";
  return absl::StrCat("it has not read what it was sent for ", deadline.count(), " ms");
}

void Relay::Rearm(int epoll_fd, std::uint64_t id) const {
  epoll_event ev{};
  ev.events = fd_events();
  ev.data.u64 = 2 * id;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd_, &ev);
  if (inner_ >= 0) {
    ev.events = inner_events();
    ev.data.u64 = 2 * id + 1;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, inner_, &ev);
  }
}

void Relay::AttachInner(int inner) {
  inner_ = inner;
  if (state_ == State::kHandshakeDone) state_ = State::kOpen;
}

std::uint32_t Relay::fd_events() const {
  if (state_ == State::kClosed) return 0;
  std::uint32_t events = 0;
  if (state_ == State::kHandshake) {
    if (handshake_wants_read_) events |= EPOLLIN;
    if (handshake_wants_write_) events |= EPOLLOUT;
    return events;
  }
  // Always reading while there is room: that is also how the end of the
  // connection shows.
  if (to_inner_.size() < kMaxBuffered) events |= EPOLLIN;
  if (read_wants_write_ || write_wants_write_) events |= EPOLLOUT;
  return events;
}

std::uint32_t Relay::inner_events() const {
  if (state_ != State::kOpen || inner_ < 0) return 0;
  std::uint32_t events = 0;
  if (!inner_eof_ && to_peer_.size() < kMaxBuffered) events |= EPOLLIN;
  if (!to_inner_.empty()) events |= EPOLLOUT;
  return events;
}

Relay::State Relay::Drive(Clock::time_point now) {
  if (state_ == State::kHandshake) {
    Handshake();
    return state_;
  }
  if (state_ != State::kOpen) return state_;
  // Each direction until it would block; a full buffer on one side waits
  // for the other side to drain it (which drives this again).
  ReadPeer(now);
  WriteInner();
  ReadInner();
  WritePeer(now);
  if (state_ == State::kOpen && inner_eof_ && to_peer_.empty()) Fail("");  // gRPC closed it.
  return state_;
}

Relay::State Relay::OnEvent(bool inner, std::uint32_t events, Clock::time_point now) {
  if (inner && (events & (EPOLLHUP | EPOLLERR)) != 0) {
    Drive(now);
    Fail("");
    return state_;
  }
  if (!inner && (events & EPOLLERR) != 0) {
    Fail("");
    return state_;
  }
  return Drive(now);
}

void Relay::Handshake() {
  if (ssl_ == nullptr) {
    state_ = State::kHandshakeDone;
    return;
  }
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    state_ = State::kHandshakeDone;
    return;
  }
  const int err = SSL_get_error(ssl_, rc);
  handshake_wants_read_ = err == SSL_ERROR_WANT_READ;
  handshake_wants_write_ = err == SSL_ERROR_WANT_WRITE;
  if (!handshake_wants_read_ && !handshake_wants_write_) {
    // A peer that leaves before finishing is gone, not refused.
    const bool left =
        err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0);
    Fail(left ? "" : absl::StrCat("TLS handshake failed: ", TlsContext::LastError()));
  }
}

void Relay::ReadPeer(Clock::time_point now) {
  char buf[kChunk];
  read_wants_write_ = false;
  while (state_ == State::kOpen && to_inner_.size() < kMaxBuffered) {
    const int n = ssl_ != nullptr ? SSL_read(ssl_, buf, sizeof(buf)) : ReadPlain(buf);
    if (n > 0) {
      if (!inspector_.Feed(buf, static_cast<std::size_t>(n), now)) {
        broke_limit_ = true;
        Fail(inspector_.why());
        return;
      }
      to_inner_.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (ssl_ == nullptr) {
      if (n < 0) return;  // Nothing more to read now.
      Fail("");           // The peer closed (or reset) its end.
      return;
    }
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_READ) return;
    if (err == SSL_ERROR_WANT_WRITE) {  // A TLS 1.3 key update to answer.
      read_wants_write_ = true;
      return;
    }
    Fail(err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
             ? ""
             : absl::StrCat("TLS read failed: ", TlsContext::LastError()));
    return;
  }
}

int Relay::ReadPlain(char* buf) {
  for (;;) {
    const ssize_t n = recv(fd_, buf, kChunk, 0);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    // -1: would block; 0: the end (an error ends it just the same).
    return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : 0;
  }
}

int Relay::WritePlain(std::size_t size) {
  for (;;) {
    const ssize_t n = send(fd_, to_peer_.data(), size, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : 0;
  }
}

void Relay::WriteInner() {
  while (state_ == State::kOpen && !to_inner_.empty()) {
    const ssize_t n = send(inner_, to_inner_.data(), to_inner_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      to_inner_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    inner_eof_ = true;  // gRPC closed its end.
    to_inner_.clear();
    return;
  }
}

void Relay::ReadInner() {
  char buf[kChunk];
  while (state_ == State::kOpen && !inner_eof_ && to_peer_.size() < kMaxBuffered) {
    const ssize_t n = recv(inner_, buf, sizeof(buf), 0);
    if (n > 0) {
      to_peer_.append(buf, static_cast<std::size_t>(n));
      inspector_.Sent(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    inner_eof_ = true;
  }
}

void Relay::WritePeer(Clock::time_point now) {
  write_wants_write_ = false;
  while (state_ == State::kOpen && !to_peer_.empty()) {
    const std::size_t chunk = std::min(to_peer_.size(), kChunk);
    const int n = ssl_ != nullptr ? SSL_write(ssl_, to_peer_.data(), static_cast<int>(chunk))
                                  : WritePlain(chunk);
    if (n > 0) {
      to_peer_.erase(0, static_cast<std::size_t>(n));
      stalled_since_ = to_peer_.empty() ? Clock::time_point{} : now;
      continue;
    }
    if (ssl_ == nullptr) {
      if (n < 0) {  // The peer's socket is full.
        write_wants_write_ = true;
        if (stalled_since_ == Clock::time_point{}) stalled_since_ = now;
        return;
      }
      Fail("");  // The peer is gone.
      return;
    }
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
      write_wants_write_ = err == SSL_ERROR_WANT_WRITE;
      if (stalled_since_ == Clock::time_point{}) stalled_since_ = now;
      return;
    }
    Fail(err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0
             ? ""
             : absl::StrCat("TLS write failed: ", TlsContext::LastError()));
    return;
  }
}

void WatchLoopSockets(int epoll_fd, int listen_fd, int wake_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
}

void RunRelayLoop(
    int epoll_fd, std::chrono::milliseconds sweep_every, const std::function<void()>& accept,
    const std::function<void(std::uint64_t id, bool inner, std::uint32_t events)>& relay_event,
    const std::function<void()>& sweep) {
  epoll_event events[64];
  auto next_sweep = Relay::Clock::now();
  while (true) {
    const int n = epoll_wait(epoll_fd, events, 64, static_cast<int>(sweep_every.count()));
    if (n < 0 && errno != EINTR) {
      std::perror("mt_asyncio control: epoll_wait");
      return;
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) return;
      if (tag == kListenTag) {
        accept();
        continue;
      }
      relay_event(tag / 2, (tag & 1) != 0, events[i].events);
    }
    const auto now = Relay::Clock::now();
    if (now >= next_sweep) {
      sweep();
      next_sweep = now + sweep_every;
    }
  }
}

}  // namespace mt::control
