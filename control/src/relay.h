// One connection of a listener of the control plane: the peer's socket on
// one side (under TLS for the TCP listener, in the clear for the Unix
// socket's), the local socket gRPC serves on the other, and the bytes
// between them, inspected on their way in and bounded both ways.
//
// Driven by its listener's single thread: Drive() does all that can be
// done without blocking and says which readiness it waits for next.

#ifndef MT_ASYNCIO_CONTROL_SRC_RELAY_H_
#define MT_ASYNCIO_CONTROL_SRC_RELAY_H_

#include <openssl/ssl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "control/src/h2_inspector.h"

namespace mt::control {

class Relay {
 public:
  using Clock = std::chrono::steady_clock;

  // Bytes held in each direction before the connection stops reading the
  // side that sends them.
  static constexpr std::size_t kMaxBuffered = 256 * 1024;

  // Takes `fd` (the accepted socket, non-blocking) and `ssl` (a server
  // session on it, or nullptr: the peer speaks in the clear and there is
  // no handshake, so Drive() reports kHandshakeDone at once).
  Relay(int fd, SSL* ssl, H2Limits limits, Clock::time_point now = Clock::now());
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  enum class State { kHandshake, kHandshakeDone, kOpen, kClosed };
  // Moves bytes until every side would block. kHandshakeDone once, when
  // the handshake has just finished: the caller attaches the gRPC side
  // (AttachInner) and drives again.
  State Drive(Clock::time_point now = Clock::now());
  // Drive() for readiness `events` (epoll's) on the peer's socket or, with
  // `inner`, on gRPC's: a hangup or error on gRPC's side forwards what it
  // sent last and ends the connection (waiting on the peer could spin on
  // the hangup), an error on the peer's ends it.
  State OnEvent(bool inner, std::uint32_t events, Clock::time_point now = Clock::now());
  // Takes `inner` (non-blocking): the socket whose other end gRPC serves.
  void AttachInner(int inner);

  // Ends the connection (both sockets closed by the destructor).
  void Close(std::string why);

  int fd() const { return fd_; }
  int inner() const { return inner_; }
  // The epoll events each socket waits for now.
  std::uint32_t fd_events() const;
  std::uint32_t inner_events() const;
  // Sets both sockets' interest in `epoll_fd` to the events above, the
  // peer's under tag `2 * id`, the inner one's under `2 * id + 1`.
  void Rearm(int epoll_fd, std::uint64_t id) const;

  bool handshaken() const { return state_ != State::kHandshake; }
  const Clock::time_point accepted_at;
  // Why the peer must go for not reading: bytes for it have waited
  // `deadline` without any being taken. "" while it keeps up.
  std::string StalledPast(Clock::time_point now, std::chrono::milliseconds deadline) const;
  // Why it closed: "" when the peer or gRPC ended it in the ordinary way.
  const std::string& why() const { return why_; }
  // Whether it closed for breaking an HTTP/2 limit (why() says which).
  bool broke_limit() const { return broke_limit_; }
  std::string subject() const;

 private:
  void Handshake();
  void ReadPeer(Clock::time_point now);
  void WriteInner();
  void ReadInner();
  void WritePeer(Clock::time_point now);
  // The peer's socket in the clear: bytes moved, -1 when it would block,
  // 0 when it has ended.
  int ReadPlain(char* buf);
  int WritePlain(std::size_t size);
  void Fail(std::string why);

  const int fd_;
  SSL* const ssl_;
  int inner_ = -1;
  State state_ = State::kHandshake;
  H2Inspector inspector_;
  std::string to_inner_;  // Plaintext from the peer, for gRPC.
  std::string to_peer_;   // Plaintext from gRPC, for the peer.
  // What TLS waits for on the peer's socket: in the handshake, and when a
  // read or a write could not go on.
  bool handshake_wants_read_ = true;
  bool handshake_wants_write_ = false;
  bool read_wants_write_ = false;  // A TLS 1.3 key update to answer.
  bool write_wants_write_ = false;
  bool inner_eof_ = false;
  bool broke_limit_ = false;
  Clock::time_point stalled_since_{};
  std::string why_;
};

// The epoll tags of RunRelayLoop: the listening socket's, the stopping
// eventfd's, and a relay's two sockets' (2 * id and 2 * id + 1, id >= 1).
inline constexpr std::uint64_t kListenTag = 0;
inline constexpr std::uint64_t kWakeTag = 1;

// Adds the listening socket and the stopping eventfd to `epoll_fd` under
// their tags.
void WatchLoopSockets(int epoll_fd, int listen_fd, int wake_fd);

// The loop a listener's thread runs over its relays: epoll events on the
// listening socket (`accept()`), on the eventfd that stops it (returns),
// and on each relay's two sockets (`relay_event(id, inner, events)`), and
// `sweep()` every `sweep_every`.
void RunRelayLoop(
    int epoll_fd, std::chrono::milliseconds sweep_every, const std::function<void()>& accept,
    const std::function<void(std::uint64_t id, bool inner, std::uint32_t events)>& relay_event,
    const std::function<void()>& sweep);

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_RELAY_H_
