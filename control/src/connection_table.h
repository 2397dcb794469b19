// The TCP listener's connections: caps on how many may be open (in all and
// per peer address before they authenticate), the deadlines each must
// meet, and who is behind each one once gRPC serves it.
//
// The listener terminates TLS and hands gRPC a local socket per
// connection; gRPC then knows the connection only by that socket's name
// (its peer string) and by the acceptor it came through (its slot). The
// table answers, for either, which address and client certificate the
// connection has, so the token check and the handlers can name the peer.

#ifndef MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_
#define MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mt::control {

struct ConnectionLimits {
  // Connections open at once, all peers together. Each costs three
  // descriptors (the peer's socket and the local pair to gRPC).
  int max_connections = 64;
  // Connections open at once from one peer address that have not yet
  // made a call with a valid token. (Authenticated ones do not count:
  // many clients may share an address, 127.0.0.1 or a NAT's.)
  int max_per_peer = 8;
  // From accept to the end of the TLS handshake.
  std::chrono::milliseconds handshake_deadline{10'000};
  // From accept to the first call that carries a valid token.
  std::chrono::milliseconds first_call_deadline{10'000};
  // How long bytes for the peer may wait for it to read them.
  std::chrono::milliseconds write_deadline{10'000};
};

// Who is behind a connection the listener serves.
struct TlsPeer {
  std::string address;  // gRPC's form: "ipv4:10.0.0.2:51234".
  std::string subject;  // The client certificate's subject, or "".
};

// Lookups for the token check and the handlers (on gRPC's threads).
class TlsPeers {
 public:
  virtual ~TlsPeers() = default;
  // By the peer string of a call on a connection the listener handed over.
  virtual std::optional<TlsPeer> ByGrpcPeer(std::string_view grpc_peer) const = 0;
  // By the acceptor slot the connection was handed over through.
  virtual std::optional<TlsPeer> BySlot(int slot) const = 0;
};

class ConnectionTable final : public TlsPeers {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;

  explicit ConnectionTable(ConnectionLimits limits = {});

  const ConnectionLimits& limits() const { return limits_; }

  struct Admission {
    Id id = 0;
    int slot = -1;               // -1: refused, `why` says why.
    std::vector<Id> evicted;     // Connections to close to make room.
    std::string why;
    bool admitted() const { return slot >= 0; }
  };
  // A new connection from `address` (`host`: the address without its
  // port). When only the total cap is full, the oldest connection that
  // has not yet authenticated gives up its place (returned in `evicted`,
  // already forgotten): peers that connect and wait can delay a newcomer,
  // never lock it out. Authenticated connections are never evicted.
  Admission Open(std::string address, std::string host, Clock::time_point now = Clock::now());

  // The connection is handed to gRPC: its calls carry `grpc_peer`.
  void HandedOver(Id id, std::string grpc_peer, std::string subject);
  // A call with a valid token arrived on the connection `grpc_peer` names.
  void MarkAuthenticated(std::string_view grpc_peer);
  // The connection is closed.
  void Close(Id id);

  // Connections past the first-call deadline without an authenticated call.
  std::vector<Id> Overdue(Clock::time_point now = Clock::now()) const;

  std::optional<TlsPeer> ByGrpcPeer(std::string_view grpc_peer) const override;
  std::optional<TlsPeer> BySlot(int slot) const override;
  // The address and subject of a connection, for log lines.
  TlsPeer Describe(Id id) const;

  int open() const;
  // Connections from `host` not yet authenticated.
  int unauthenticated_from(std::string_view host) const;

 private:
  struct Entry {
    std::string address;
    std::string host;
    std::string grpc_peer;
    std::string subject;
    int slot = -1;
    bool authenticated = false;
    Clock::time_point deadline;
  };
  // Drops an entry, under mu_.
  void Forget(std::map<Id, Entry>::iterator it);

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::map<Id, Entry> entries_;                             // Guarded by mu_; by accept order.
  std::map<std::string, Id, std::less<>> by_grpc_peer_;     // Guarded by mu_.
  std::vector<Id> slots_;                                   // 0: free; guarded by mu_.
  std::map<std::string, int, std::less<>> unauthenticated_;  // By host; guarded by mu_.
  Id next_id_ = 1;                                          // Guarded by mu_.
};

// gRPC's peer string for a socket address ("ipv4:10.0.0.2:51234",
// "ipv6:[::1]:51234"; an IPv4-mapped IPv6 address is written as IPv4),
// and the same without the port in `host`. Empty for other families.
std::string PeerString(const void* sockaddr, socklen_t len, std::string* host);

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_CONNECTION_TABLE_H_
