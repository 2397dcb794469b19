#include "control/src/connection_table.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::control {

ConnectionTable::ConnectionTable(ConnectionLimits limits)
    : limits_(limits), slots_(static_cast<std::size_t>(std::max(limits.max_connections, 1)), 0) {}

void ConnectionTable::Forget(std::map<Id, Entry>::iterator it) {
  const Entry& e = it->second;
  if (!e.authenticated && --unauthenticated_[e.host] <= 0) unauthenticated_.erase(e.host);
  if (!e.grpc_peer.empty()) by_grpc_peer_.erase(e.grpc_peer);
  if (e.slot >= 0) slots_[static_cast<std::size_t>(e.slot)] = 0;
  entries_.erase(it);
}

ConnectionTable::Admission ConnectionTable::Open(std::string address, std::string host,
                                                 Clock::time_point now) {
  Admission a;
  std::lock_guard<std::mutex> lock(mu_);
  auto waiting = unauthenticated_.find(host);
  if (waiting != unauthenticated_.end() && waiting->second >= limits_.max_per_peer) {
    a.why = absl::StrCat(waiting->second,
                         " connections from this address are open without a valid token yet "
                         "(the cap is ",
                         limits_.max_per_peer, ")");
    return a;
  }
  if (entries_.size() >= slots_.size()) {
    // Entries are in accept order: the first unauthenticated is the oldest.
    auto oldest = entries_.begin();
    while (oldest != entries_.end() && oldest->second.authenticated) ++oldest;
    if (oldest == entries_.end()) {
      a.why = absl::StrCat(entries_.size(), " control connections are open (the cap is ",
                           slots_.size(), "), all of them authenticated");
      return a;
    }
    a.evicted.push_back(oldest->first);
    Forget(oldest);
  }
  std::size_t slot = 0;
  while (slots_[slot] != 0) ++slot;  // One is free: fewer entries than slots.
  Entry e;
  e.address = std::move(address);
  e.host = std::move(host);
  e.slot = static_cast<int>(slot);
  e.deadline = now + limits_.first_call_deadline;
  a.id = next_id_++;
  a.slot = e.slot;
  slots_[slot] = a.id;
  ++unauthenticated_[e.host];
  entries_.emplace(a.id, std::move(e));
  return a;
}

void ConnectionTable::HandedOver(Id id, std::string grpc_peer, std::string subject) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.grpc_peer = grpc_peer;
  it->second.subject = std::move(subject);
  by_grpc_peer_[std::move(grpc_peer)] = id;
}

void ConnectionTable::MarkAuthenticated(std::string_view grpc_peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = by_grpc_peer_.find(grpc_peer);
  if (found == by_grpc_peer_.end()) return;
  Entry& e = entries_.at(found->second);
  if (e.authenticated) return;
  e.authenticated = true;
  if (--unauthenticated_[e.host] <= 0) unauthenticated_.erase(e.host);
}

void ConnectionTable::Close(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) Forget(it);
}

std::vector<ConnectionTable::Id> ConnectionTable::Overdue(Clock::time_point now) const {
  std::vector<Id> overdue;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : entries_) {
    if (!e.authenticated && now >= e.deadline) overdue.push_back(id);
  }
  return overdue;
}

std::optional<TlsPeer> ConnectionTable::ByGrpcPeer(std::string_view grpc_peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = by_grpc_peer_.find(grpc_peer);
  if (found == by_grpc_peer_.end()) return std::nullopt;
  const Entry& e = entries_.at(found->second);
  return TlsPeer{e.address, e.subject};
}

std::optional<TlsPeer> ConnectionTable::BySlot(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot < 0 || static_cast<std::size_t>(slot) >= slots_.size() ||
      slots_[static_cast<std::size_t>(slot)] == 0) {
    return std::nullopt;
  }
  const Entry& e = entries_.at(slots_[static_cast<std::size_t>(slot)]);
  return TlsPeer{e.address, e.subject};
}

TlsPeer ConnectionTable::Describe(Id id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? TlsPeer{} : TlsPeer{it->second.address, it->second.subject};
}

int ConnectionTable::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

int ConnectionTable::unauthenticated_from(std::string_view host) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = unauthenticated_.find(host);
  return it == unauthenticated_.end() ? 0 : it->second;
}

std::string PeerString(const void* sockaddr, socklen_t len, std::string* host) {
  const auto* sa = static_cast<const struct sockaddr*>(sockaddr);
  char text[INET6_ADDRSTRLEN] = {};
  std::string h;
  int port = 0;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* in = static_cast<const sockaddr_in*>(sockaddr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    h = absl::StrCat("ipv4:", text);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* in6 = static_cast<const sockaddr_in6*>(sockaddr);
    port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      // gRPC writes these as the IPv4 address they carry.
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof(text));
      h = absl::StrCat("ipv4:", text);
    } else {
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      h = absl::StrCat("ipv6:[", text, "]");
    }
  } else {
    if (host != nullptr) host->clear();
    return "";
  }
  std::string peer = absl::StrCat(h, ":", port);
  if (host != nullptr) *host = std::move(h);
  return peer;
}

}  // namespace mt::control
