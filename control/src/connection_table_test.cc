#include "control/src/connection_table.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace mt::control {
namespace {

using namespace std::chrono_literals;

// A connected pair: `served` plays the descriptor gRPC owns, `peer` the
// client's end.
struct Pair {
  int served = -1;
  int peer = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    served = fds[0];
    peer = fds[1];
  }
  ~Pair() {
    if (served >= 0) close(served);
    if (peer >= 0) close(peer);
  }
  int Watch() const { return fcntl(served, F_DUPFD_CLOEXEC, 0); }
};

// What the client's end reads: 0 once the connection is shut down, -1
// (EAGAIN) while it is open.
ssize_t PeerRead(const Pair& p) {
  char c;
  return recv(p.peer, &c, 1, MSG_DONTWAIT);
}

TEST(ConnectionTableTest, CapsInAllAndPerPeer) {
  ConnectionTable table({.max_connections = 3, .max_per_peer = 2});
  Pair a1, a2, b1, c1;
  std::string why;
  EXPECT_TRUE(table.MayOpen("ipv4:10.0.0.1", &why));
  table.Add("ipv4:10.0.0.1:1", "ipv4:10.0.0.1", a1.Watch(), a1.served, false);
  table.Add("ipv4:10.0.0.1:2", "ipv4:10.0.0.1", a2.Watch(), a2.served, false);
  EXPECT_FALSE(table.MayOpen("ipv4:10.0.0.1", &why));
  EXPECT_NE(why.find("without a valid token yet (the cap is 2)"), std::string::npos) << why;
  // Once one has authenticated, the address has room again.
  table.MarkAuthenticated("ipv4:10.0.0.1:1");
  EXPECT_EQ(table.open_from("ipv4:10.0.0.1"), 1);
  EXPECT_TRUE(table.MayOpen("ipv4:10.0.0.1", &why));
  table.MarkAuthenticated("ipv4:10.0.0.1:2");
  EXPECT_TRUE(table.MayOpen("ipv4:10.0.0.2", &why));
  table.Add("ipv4:10.0.0.2:1", "ipv4:10.0.0.2", b1.Watch(), b1.served, false);
  EXPECT_FALSE(table.MayOpen("ipv4:10.0.0.3", &why));
  EXPECT_NE(why.find("(the cap is 3)"), std::string::npos) << why;
  EXPECT_EQ(table.open(), 3);
  EXPECT_EQ(table.open_from("ipv4:10.0.0.1"), 0);
  EXPECT_EQ(table.open_from("ipv4:10.0.0.2"), 1);
}

TEST(ConnectionTableTest, AFullTableMakesRoomByClosingTheOldestUnauthenticated) {
  ConnectionTable table({.max_connections = 3, .max_per_peer = 3});
  Pair proven, old, young, newcomer;
  table.Add("ipv4:10.0.0.1:1", "ipv4:10.0.0.1", proven.Watch(), proven.served, false);
  table.Add("ipv4:10.0.0.2:1", "ipv4:10.0.0.2", old.Watch(), old.served, false);
  table.Add("ipv4:10.0.0.3:1", "ipv4:10.0.0.3", young.Watch(), young.served, false);
  table.MarkAuthenticated("ipv4:10.0.0.1:1");
  std::string why;
  std::vector<ConnectionTable::Expired> evicted;
  ASSERT_TRUE(table.MayOpen("ipv4:10.0.0.4", &why, &evicted));
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].peer, "ipv4:10.0.0.2:1");
  EXPECT_EQ(PeerRead(old), 0);
  EXPECT_EQ(PeerRead(proven), -1);
  EXPECT_EQ(PeerRead(young), -1);
  table.Add("ipv4:10.0.0.4:1", "ipv4:10.0.0.4", newcomer.Watch(), newcomer.served, false);
  table.MarkAuthenticated("ipv4:10.0.0.3:1");
  table.MarkAuthenticated("ipv4:10.0.0.4:1");
  // Every place held by an authenticated connection: refused.
  evicted.clear();
  EXPECT_FALSE(table.MayOpen("ipv4:10.0.0.5", &why, &evicted));
  EXPECT_TRUE(evicted.empty());
  EXPECT_NE(why.find("all of them authenticated"), std::string::npos) << why;
  EXPECT_EQ(table.open(), 3);
}

TEST(ConnectionTableTest, ConnectionsGrpcClosedAreForgotten) {
  ConnectionTable table({.max_connections = 1});
  Pair a;
  table.Add("ipv4:10.0.0.1:1", "ipv4:10.0.0.1", a.Watch(), a.served, true);
  EXPECT_TRUE(table.Sweep().empty());
  EXPECT_EQ(table.open(), 1);
  // gRPC closes its descriptor; the duplicate alone keeps the socket.
  close(a.served);
  // Another file takes the number: it is not the same socket.
  const int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  EXPECT_TRUE(table.Sweep().empty());  // Forgotten, not expired.
  EXPECT_EQ(table.open(), 0);
  // With the duplicate closed too, the client sees the end.
  EXPECT_EQ(PeerRead(a), 0);
  close(other);
  a.served = -1;
}

TEST(ConnectionTableTest, UnauthenticatedConnectionsEndAtTheDeadline) {
  ConnectionTable table({.first_call_deadline = 100ms});
  Pair quiet, proven, trusted;
  const auto t0 = ConnectionTable::Clock::now();
  table.Add("ipv4:10.0.0.1:1", "ipv4:10.0.0.1", quiet.Watch(), quiet.served, false, t0);
  table.Add("ipv4:10.0.0.1:2", "ipv4:10.0.0.1", proven.Watch(), proven.served, false, t0);
  table.Add("fd:99", "uid=0", trusted.Watch(), trusted.served, true, t0);
  table.MarkAuthenticated("ipv4:10.0.0.1:2");
  table.MarkAuthenticated("ipv4:10.0.0.9:1");  // Unknown: nothing happens.
  EXPECT_TRUE(table.Sweep(t0 + 99ms).empty());
  EXPECT_EQ(PeerRead(quiet), -1);
  const auto expired = table.Sweep(t0 + 100ms);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].peer, "ipv4:10.0.0.1:1");
  EXPECT_EQ(expired[0].host, "ipv4:10.0.0.1");
  // Shut down under gRPC's descriptor: both ends see it.
  EXPECT_EQ(PeerRead(quiet), 0);
  char c;
  EXPECT_EQ(recv(quiet.served, &c, 1, MSG_DONTWAIT), 0);
  EXPECT_EQ(PeerRead(proven), -1);
  EXPECT_EQ(PeerRead(trusted), -1);
  EXPECT_EQ(table.open(), 2);
}

TEST(ConnectionTableTest, APeerStringSeenAgainReplacesTheOldEntry) {
  ConnectionTable table;
  Pair a, b;
  table.Add("fd:7", "uid=0", a.Watch(), a.served, false);
  table.Add("fd:7", "uid=0", b.Watch(), b.served, false);
  EXPECT_EQ(table.open(), 1);
  EXPECT_EQ(table.open_from("uid=0"), 1);
}

TEST(PeerStringTest, WritesAddressesAsGrpcDoes) {
  std::string host;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(51234);
  inet_pton(AF_INET, "10.0.0.2", &in.sin_addr);
  EXPECT_EQ(PeerString(&in, sizeof(in), &host), "ipv4:10.0.0.2:51234");
  EXPECT_EQ(host, "ipv4:10.0.0.2");
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(7);
  inet_pton(AF_INET6, "::1", &in6.sin6_addr);
  EXPECT_EQ(PeerString(&in6, sizeof(in6), &host), "ipv6:[::1]:7");
  EXPECT_EQ(host, "ipv6:[::1]");
  inet_pton(AF_INET6, "::ffff:192.0.2.5", &in6.sin6_addr);
  EXPECT_EQ(PeerString(&in6, sizeof(in6), &host), "ipv4:192.0.2.5:7");
  EXPECT_EQ(host, "ipv4:192.0.2.5");
  sockaddr other{};
  other.sa_family = AF_UNIX;
  EXPECT_EQ(PeerString(&other, sizeof(other), &host), "");
  EXPECT_EQ(host, "");
}

}  // namespace
}  // namespace mt::control
