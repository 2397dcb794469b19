#include "control/src/connection_table.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace mt::control {
namespace {

using namespace std::chrono_literals;

TEST(ConnectionTableTest, CapsInAllAndPerAddressBeforeAuthentication) {
  ConnectionTable table({.max_connections = 3, .max_per_peer = 2});
  const auto a1 = table.Open("ipv4:10.0.0.1:1", "ipv4:10.0.0.1");
  const auto a2 = table.Open("ipv4:10.0.0.1:2", "ipv4:10.0.0.1");
  ASSERT_TRUE(a1.admitted() && a2.admitted());
  EXPECT_NE(a1.slot, a2.slot);
  const auto a3 = table.Open("ipv4:10.0.0.1:3", "ipv4:10.0.0.1");
  EXPECT_FALSE(a3.admitted());
  EXPECT_NE(a3.why.find("without a valid token yet (the cap is 2)"), std::string::npos) << a3.why;
  // Once one has authenticated, the address has room again.
  table.HandedOver(a1.id, "unix-abstract:a1", "CN=ops");
  table.MarkAuthenticated("unix-abstract:a1");
  table.MarkAuthenticated("unix-abstract:unknown");  // Nothing happens.
  EXPECT_EQ(table.unauthenticated_from("ipv4:10.0.0.1"), 1);
  EXPECT_TRUE(table.Open("ipv4:10.0.0.1:4", "ipv4:10.0.0.1").admitted());
  EXPECT_EQ(table.open(), 3);
}

TEST(ConnectionTableTest, AFullTableMakesRoomByClosingTheOldestUnauthenticated) {
  ConnectionTable table({.max_connections = 3, .max_per_peer = 3});
  const auto proven = table.Open("ipv4:10.0.0.1:1", "ipv4:10.0.0.1");
  const auto old = table.Open("ipv4:10.0.0.2:1", "ipv4:10.0.0.2");
  const auto young = table.Open("ipv4:10.0.0.3:1", "ipv4:10.0.0.3");
  table.HandedOver(proven.id, "unix-abstract:p", "");
  table.MarkAuthenticated("unix-abstract:p");
  const auto newcomer = table.Open("ipv4:10.0.0.4:1", "ipv4:10.0.0.4");
  ASSERT_TRUE(newcomer.admitted());
  ASSERT_EQ(newcomer.evicted.size(), 1u);
  EXPECT_EQ(newcomer.evicted[0], old.id);
  EXPECT_EQ(newcomer.slot, old.slot);  // The evicted one's place.
  EXPECT_EQ(table.Describe(old.id).address, "");
  table.HandedOver(young.id, "unix-abstract:y", "");
  table.MarkAuthenticated("unix-abstract:y");
  table.HandedOver(newcomer.id, "unix-abstract:n", "");
  table.MarkAuthenticated("unix-abstract:n");
  const auto refused = table.Open("ipv4:10.0.0.5:1", "ipv4:10.0.0.5");
  EXPECT_FALSE(refused.admitted());
  EXPECT_TRUE(refused.evicted.empty());
  EXPECT_NE(refused.why.find("all of them authenticated"), std::string::npos) << refused.why;
  table.Close(young.id);
  EXPECT_TRUE(table.Open("ipv4:10.0.0.5:1", "ipv4:10.0.0.5").admitted());
}

TEST(ConnectionTableTest, PeersAreFoundByGrpcPeerAndBySlotUntilClosed) {
  ConnectionTable table;
  const auto a = table.Open("ipv4:10.0.0.7:99", "ipv4:10.0.0.7");
  EXPECT_FALSE(table.ByGrpcPeer("unix-abstract:x").has_value());
  ASSERT_TRUE(table.BySlot(a.slot).has_value());
  EXPECT_EQ(table.BySlot(a.slot)->address, "ipv4:10.0.0.7:99");
  table.HandedOver(a.id, "unix-abstract:x", "CN=ops");
  ASSERT_TRUE(table.ByGrpcPeer("unix-abstract:x").has_value());
  EXPECT_EQ(table.ByGrpcPeer("unix-abstract:x")->subject, "CN=ops");
  EXPECT_FALSE(table.BySlot(a.slot + 1).has_value());
  EXPECT_FALSE(table.BySlot(-1).has_value());
  EXPECT_FALSE(table.BySlot(1000).has_value());
  table.Close(a.id);
  EXPECT_FALSE(table.ByGrpcPeer("unix-abstract:x").has_value());
  EXPECT_FALSE(table.BySlot(a.slot).has_value());
  EXPECT_EQ(table.open(), 0);
  EXPECT_EQ(table.unauthenticated_from("ipv4:10.0.0.7"), 0);
}

TEST(ConnectionTableTest, OverdueAreThoseWithoutAnAuthenticatedCallByTheDeadline) {
  ConnectionTable table({.first_call_deadline = 100ms});
  const auto t0 = ConnectionTable::Clock::now();
  const auto quiet = table.Open("ipv4:10.0.0.1:1", "ipv4:10.0.0.1", t0);
  const auto proven = table.Open("ipv4:10.0.0.1:2", "ipv4:10.0.0.1", t0);
  table.HandedOver(proven.id, "unix-abstract:p", "");
  table.MarkAuthenticated("unix-abstract:p");
  EXPECT_TRUE(table.Overdue(t0 + 99ms).empty());
  EXPECT_EQ(table.Overdue(t0 + 100ms), std::vector<ConnectionTable::Id>{quiet.id});
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
