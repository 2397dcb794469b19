#include "control/src/connection_table.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::control {

ConnectionTable::~ConnectionTable() {
  for (auto& [peer, e] : by_peer_) close(e.watch_fd);
}

ConnectionTable::Entries::iterator ConnectionTable::Forget(Entries::iterator it) {
  const Entry& e = it->second;
  close(e.watch_fd);
  if (!e.authenticated && --per_host_[e.host] <= 0) per_host_.erase(e.host);
  return by_peer_.erase(it);
}

bool ConnectionTable::MayOpen(std::string_view host, std::string* why,
                              std::vector<Expired>* evicted) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_host_.find(host);
  if (it != per_host_.end() && it->second >= limits_.max_per_peer) {
    if (why != nullptr) {
      *why = absl::StrCat(it->second,
                          " connections from this address are open without a valid token yet "
                          "(the cap is ",
                          limits_.max_per_peer, ")");
    }
    return false;
  }
  if (static_cast<int>(by_peer_.size()) < limits_.max_connections) return true;
  auto oldest = by_peer_.end();
  for (auto e = by_peer_.begin(); e != by_peer_.end(); ++e) {
    if (!e->second.authenticated &&
        (oldest == by_peer_.end() || e->second.order < oldest->second.order)) {
      oldest = e;
    }
  }
  if (oldest == by_peer_.end() || evicted == nullptr) {
    if (why != nullptr) {
      *why = absl::StrCat(by_peer_.size(), " control connections are open (the cap is ",
                          limits_.max_connections, ")",
                          oldest == by_peer_.end() ? ", all of them authenticated" : "");
    }
    return false;
  }
  shutdown(oldest->second.watch_fd, SHUT_RDWR);
  evicted->push_back({oldest->second.peer, oldest->second.host});
  Forget(oldest);
  return true;
}

void ConnectionTable::Add(std::string peer, std::string host, int watch_fd, int served_fd,
                          bool authenticated, Clock::time_point now) {
  Entry e;
  e.peer = std::move(peer);
  e.host = std::move(host);
  e.watch_fd = watch_fd;
  e.served_fd = served_fd;
  e.authenticated = authenticated;
  e.deadline = now + limits_.first_call_deadline;
  struct stat st {};
  if (fstat(watch_fd, &st) == 0) {
    e.dev = st.st_dev;
    e.ino = st.st_ino;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto old = by_peer_.find(e.peer);
  if (old != by_peer_.end()) {
    // The same peer string again: the earlier connection is gone (its
    // descriptor number or its address and port were reused).
    Forget(old);
  }
  if (!e.authenticated) ++per_host_[e.host];
  e.order = ++added_;
  std::string key = e.peer;
  by_peer_.emplace(std::move(key), std::move(e));
}

void ConnectionTable::MarkAuthenticated(std::string_view peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_peer_.find(peer);
  if (it == by_peer_.end() || it->second.authenticated) return;
  it->second.authenticated = true;
  if (--per_host_[it->second.host] <= 0) per_host_.erase(it->second.host);
}

bool ConnectionTable::StillServed(const Entry& e) {
  struct stat st {};
  return fstat(e.served_fd, &st) == 0 && st.st_dev == e.dev && st.st_ino == e.ino;
}

std::vector<ConnectionTable::Expired> ConnectionTable::Sweep(Clock::time_point now) {
  std::vector<Expired> expired;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = by_peer_.begin(); it != by_peer_.end();) {
    Entry& e = it->second;
    const bool served = StillServed(e);
    if (served && (e.authenticated || now < e.deadline)) {
      ++it;
      continue;
    }
    if (served) {
      // Both directions: gRPC reads the end of the stream and closes its
      // descriptor, and the peer sees the connection end.
      shutdown(e.watch_fd, SHUT_RDWR);
      expired.push_back({e.peer, e.host});
    }
    it = Forget(it);
  }
  return expired;
}

int ConnectionTable::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(by_peer_.size());
}

int ConnectionTable::open_from(std::string_view host) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_host_.find(host);
  return it == per_host_.end() ? 0 : it->second;
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
