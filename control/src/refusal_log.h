// Who the control plane turned away: per-peer counters for GetInfo and a
// bounded record on stderr.
//
// Every refusal (a connection from another uid, a call without a valid
// token, a read-only token on a mutating method) names its peer. A client
// that is refused a thousand times a second must not turn the service's
// stderr into its own log, so lines are limited to a steady rate with a
// short burst; the line written after a quiet spell says how many were
// left out, and the counters stay exact.

#ifndef MT_ASYNCIO_CONTROL_SRC_REFUSAL_LOG_H_
#define MT_ASYNCIO_CONTROL_SRC_REFUSAL_LOG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mt::control {

enum class RefusalKind {
  kConnection,        // The listener closed it: the peer's uid is not allowed.
  kUnauthenticated,   // A call without a valid bearer token.
  kPermissionDenied,  // A read-only token on a mutating method.
};

// One peer's refusals. A peer is who the transport can name: "uid=1001"
// on the Unix socket, the address without its port over TCP
// ("ipv4:10.0.0.2"); the client certificate's subject is kept beside it.
struct PeerRefusals {
  std::string peer;
  std::string client_subject;  // The last one seen; "" without mutual TLS.
  std::uint64_t connections = 0;
  std::uint64_t unauthenticated = 0;
  std::uint64_t permission_denied = 0;
  std::string last_reason;
  std::chrono::steady_clock::time_point last{};
};

class RefusalLog {
 public:
  // Peers tracked one by one; refusals of further peers are counted under
  // kOtherPeers, so a client cycling through addresses cannot grow the
  // table (or push the first peers out of it).
  static constexpr std::size_t kMaxPeers = 64;
  static constexpr std::string_view kOtherPeers = "(other peers)";
  // Lines written: at most kBurstLines at once, then kLinesPerSecond.
  static constexpr double kLinesPerSecond = 5;
  static constexpr double kBurstLines = 20;

  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string& line)>;

  // `sink` receives each line written (default: stderr); `now` is the
  // clock (tests pass their own).
  explicit RefusalLog(Sink sink = nullptr, std::function<Clock::time_point()> now = nullptr);

  // Counts a refusal of `peer` and writes "mt_asyncio control: <line>",
  // unless over the rate; then the next line written ends with how many
  // were left out.
  void Record(RefusalKind kind, std::string_view peer, std::string_view client_subject,
              std::string_view reason, std::string_view line);

  // The peers refused so far, most refusals first.
  std::vector<PeerRefusals> Snapshot() const;

  std::uint64_t total(RefusalKind kind) const;
  std::uint64_t suppressed_lines() const;

 private:
  const Sink sink_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::map<std::string, PeerRefusals, std::less<>> peers_;  // Guarded by mu_.
  std::uint64_t totals_[3] = {0, 0, 0};                     // Guarded by mu_.
  double tokens_ = kBurstLines;                             // Guarded by mu_.
  Clock::time_point refilled_{};                            // Guarded by mu_.
  std::uint64_t unwritten_ = 0;  // Since the last line written; guarded by mu_.
  std::uint64_t suppressed_ = 0;  // Ever; guarded by mu_.
};

// The peer key of a gRPC peer string: its address without the port
// ("ipv4:10.0.0.2:51234" -> "ipv4:10.0.0.2", "ipv6:[::1]:5" ->
// "ipv6:[::1]"); other forms unchanged.
std::string PeerAddress(std::string_view grpc_peer);

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_REFUSAL_LOG_H_
