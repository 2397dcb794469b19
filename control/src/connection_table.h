// The control plane's open connections, for the listeners that accept
// them: caps on how many may be open (in all and per peer address), and a
// deadline by which a connection must have made an authenticated call.
//
// The listeners accept each connection themselves and hand it to gRPC,
// which owns the descriptor from then on and closes it when it likes. So
// the table keeps a duplicate of each descriptor (the same socket under a
// number of our own): through it a connection past its deadline is shut
// down (gRPC then sees the end and closes its side), and the socket's
// identity (device and inode) tells whether gRPC still holds it.

#ifndef MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_
#define MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mt::control {

struct ConnectionLimits {
  // Connections open at once, all peers together.
  int max_connections = 64;
  // Connections open at once from one peer address that have not yet
  // made a call with a valid token. (Authenticated ones do not count:
  // many clients may share an address, 127.0.0.1 or a NAT's.)
  int max_per_peer = 8;
  // From accept to the first call that carries a valid token; a
  // connection that has made none by then is shut down. Covers the TLS
  // handshake (which gRPC bounds on its own too).
  std::chrono::milliseconds first_call_deadline{10'000};
};

class ConnectionTable {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ConnectionTable(ConnectionLimits limits = {}) : limits_(limits) {}
  ~ConnectionTable();
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  const ConnectionLimits& limits() const { return limits_; }

  struct Expired {
    std::string peer;
    std::string host;
  };

  // Whether one more connection from `host` fits under the caps; if not,
  // `why` says which cap it would pass. When only the total cap is full,
  // the oldest connection that has not yet authenticated gives up its
  // place (it is shut down and returned in `evicted`): peers that connect
  // and wait can delay a newcomer, never lock it out. Authenticated
  // connections are never evicted.
  bool MayOpen(std::string_view host, std::string* why, std::vector<Expired>* evicted = nullptr);

  // Starts tracking a connection that `served_fd` (the descriptor gRPC
  // will own) reaches, by way of `watch_fd`, a duplicate the table now
  // owns. `peer` is the peer string gRPC will give its calls
  // ("ipv4:10.0.0.2:51234"), `host` the address without its port.
  // `authenticated`: no call has to prove anything (the Unix socket,
  // whose peer's uid the listener checked).
  void Add(std::string peer, std::string host, int watch_fd, int served_fd,
           bool authenticated, Clock::time_point now = Clock::now());

  // A call with a valid token arrived on the connection `peer` names.
  void MarkAuthenticated(std::string_view peer);

  // Forgets the connections gRPC has closed (closing their duplicates)
  // and shuts down those past their deadline without an authenticated
  // call, returning them.
  std::vector<Expired> Sweep(Clock::time_point now = Clock::now());

  int open() const;
  // Connections from `host` not yet authenticated.
  int open_from(std::string_view host) const;

 private:
  struct Entry {
    std::string peer;
    std::string host;
    int watch_fd = -1;
    int served_fd = -1;
    dev_t dev = 0;
    ino_t ino = 0;
    bool authenticated = false;
    Clock::time_point deadline;
    std::uint64_t order = 0;  // Accept order, for eviction.
  };
  using Entries = std::map<std::string, Entry, std::less<>>;
  // Whether the descriptor gRPC was given still refers to this socket.
  static bool StillServed(const Entry& e);
  // Drops an entry (closing its duplicate) under mu_.
  Entries::iterator Forget(Entries::iterator it);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  Entries by_peer_;  // Guarded by mu_.
  // Unauthenticated connections by host; guarded by mu_.
  std::map<std::string, int, std::less<>> per_host_;
  std::uint64_t added_ = 0;                            // Guarded by mu_.
};

// gRPC's peer string for a socket address ("ipv4:10.0.0.2:51234",
// "ipv6:[::1]:51234"; an IPv4-mapped IPv6 address is written as IPv4),
// and the same without the port in `host`. Empty for other families.
std::string PeerString(const void* sockaddr, socklen_t len, std::string* host);

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_
