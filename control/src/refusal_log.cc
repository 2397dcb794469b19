#include "control/src/refusal_log.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace mt::control {

RefusalLog::RefusalLog(Sink sink, std::function<Clock::time_point()> now)
    : sink_(sink ? std::move(sink)
                 : Sink([](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); })),
      now_(now ? std::move(now) : std::function<Clock::time_point()>(Clock::now)) {
  refilled_ = now_();
}

void RefusalLog::Record(RefusalKind kind, std::string_view peer, std::string_view client_subject,
                        std::string_view reason, std::string_view line) {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = now_();
    auto it = peers_.find(peer);
    if (it == peers_.end()) {
      const std::string key =
          peers_.size() < kMaxPeers ? std::string(peer) : std::string(kOtherPeers);
      it = peers_.try_emplace(key).first;
      it->second.peer = key;
    }
    PeerRefusals& p = it->second;
    switch (kind) {
      case RefusalKind::kConnection:
        ++p.connections;
        break;
      case RefusalKind::kUnauthenticated:
        ++p.unauthenticated;
        break;
      case RefusalKind::kPermissionDenied:
        ++p.permission_denied;
        break;
    }
    if (!client_subject.empty()) p.client_subject = std::string(client_subject);
    p.last_reason = std::string(reason);
    p.last = now;
    ++totals_[static_cast<int>(kind)];

    const double elapsed = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(kBurstLines, tokens_ + elapsed * kLinesPerSecond);
    refilled_ = now;
    if (tokens_ < 1) {
      ++unwritten_;
      ++suppressed_;
      return;
    }
    tokens_ -= 1;
    text = "mt_asyncio control: " + std::string(line);
    if (unwritten_ > 0) {
      absl::StrAppend(&text, " (", unwritten_, " earlier refusals not logged: rate limit)");
      unwritten_ = 0;
    }
  }
  sink_(text);
}

std::vector<PeerRefusals> RefusalLog::Snapshot() const {
  std::vector<PeerRefusals> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(peers_.size());
    for (const auto& [key, p] : peers_) out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(), [](const PeerRefusals& a, const PeerRefusals& b) {
    return a.connections + a.unauthenticated + a.permission_denied >
           b.connections + b.unauthenticated + b.permission_denied;
  });
  return out;
}

std::uint64_t RefusalLog::total(RefusalKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_[static_cast<int>(kind)];
}

std::uint64_t RefusalLog::suppressed_lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_;
}

std::string PeerAddress(std::string_view grpc_peer) {
  if (grpc_peer.rfind("ipv4:", 0) != 0 && grpc_peer.rfind("ipv6:", 0) != 0) {
    return std::string(grpc_peer);
  }
  const std::size_t colon = grpc_peer.rfind(':');
  if (colon <= 4) return std::string(grpc_peer);
  const std::string_view port = grpc_peer.substr(colon + 1);
  if (port.empty() || !std::all_of(port.begin(), port.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return std::string(grpc_peer);
  }
  return std::string(grpc_peer.substr(0, colon));
}

}  // namespace mt::control
