#include "control/src/refusal_log.h"

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt::control {
namespace {

using Clock = RefusalLog::Clock;

class RefusalLogTest : public ::testing::Test {
 protected:
  RefusalLog log_{[this](const std::string& line) { lines_.push_back(line); },
                  [this] { return now_; }};
  std::vector<std::string> lines_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(RefusalLogTest, EveryLineNamesItsPeerAndCountsAreKeptPerPeer) {
  log_.Record(RefusalKind::kConnection, "uid=1001", "", "uid 1001 may not connect",
              "refused a connection from uid=1001 pid=7");
  log_.Record(RefusalKind::kUnauthenticated, "ipv4:10.0.0.2", "CN=ops", "wrong bearer token",
              "tls peer=ipv4:10.0.0.2:5: GetInfo -> UNAUTHENTICATED");
  log_.Record(RefusalKind::kUnauthenticated, "ipv4:10.0.0.2", "", "no bearer token", "again");
  log_.Record(RefusalKind::kPermissionDenied, "ipv4:10.0.0.2", "", "read-only token", "ro");
  ASSERT_EQ(lines_.size(), 4u);
  EXPECT_EQ(lines_[0], "mt_asyncio control: refused a connection from uid=1001 pid=7");
  const std::vector<PeerRefusals> peers = log_.Snapshot();
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].peer, "ipv4:10.0.0.2");  // Most refusals first.
  EXPECT_EQ(peers[0].unauthenticated, 2u);
  EXPECT_EQ(peers[0].permission_denied, 1u);
  EXPECT_EQ(peers[0].client_subject, "CN=ops");  // Kept when a later call has none.
  EXPECT_EQ(peers[0].last_reason, "read-only token");
  EXPECT_EQ(peers[1].peer, "uid=1001");
  EXPECT_EQ(peers[1].connections, 1u);
  EXPECT_EQ(log_.total(RefusalKind::kUnauthenticated), 2u);
}

TEST_F(RefusalLogTest, AFloodIsLoggedAtABoundedRateAndSaysHowManyWereLeftOut) {
  for (int i = 0; i < 1000; ++i) {
    log_.Record(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9", "", "wrong bearer token", "x");
  }
  EXPECT_EQ(lines_.size(), static_cast<std::size_t>(RefusalLog::kBurstLines));
  EXPECT_EQ(log_.suppressed_lines(), 1000u - lines_.size());
  now_ += std::chrono::seconds(1);
  log_.Record(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9", "", "wrong bearer token", "x");
  ASSERT_EQ(lines_.size(), static_cast<std::size_t>(RefusalLog::kBurstLines) + 1);
  EXPECT_EQ(lines_.back(),
            "mt_asyncio control: x (980 earlier refusals not logged: rate limit)");
  // The next line has nothing left out to report.
  log_.Record(RefusalKind::kUnauthenticated, "ipv4:10.0.0.9", "", "wrong bearer token", "y");
  EXPECT_EQ(lines_.back(), "mt_asyncio control: y");
  EXPECT_EQ(log_.Snapshot()[0].unauthenticated, 1002u);  // Counts stay exact.
}

TEST_F(RefusalLogTest, ASteadyTrickleIsLoggedInFull) {
  for (int i = 0; i < 100; ++i) {
    now_ += std::chrono::milliseconds(250);  // 4 a second, under the rate.
    log_.Record(RefusalKind::kConnection, "uid=1001", "", "r", "line");
  }
  EXPECT_EQ(lines_.size(), 100u);
  EXPECT_EQ(log_.suppressed_lines(), 0u);
}

TEST_F(RefusalLogTest, PeersBeyondTheCapShareOneEntry) {
  for (int i = 0; i < 1000; ++i) {
    log_.Record(RefusalKind::kConnection, "ipv4:10.0." + std::to_string(i / 256) + "." +
                                              std::to_string(i % 256),
                "", "r", "line");
  }
  const std::vector<PeerRefusals> peers = log_.Snapshot();
  ASSERT_EQ(peers.size(), RefusalLog::kMaxPeers + 1);
  EXPECT_EQ(peers[0].peer, RefusalLog::kOtherPeers);
  EXPECT_EQ(peers[0].connections, 1000u - RefusalLog::kMaxPeers);
  EXPECT_EQ(log_.total(RefusalKind::kConnection), 1000u);
}

TEST(PeerAddressTest, DropsThePortOnly) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.2:51234"), "ipv4:10.0.0.2");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:%5B%3A%3A1%5D:443"), "ipv6:%5B%3A%3A1%5D");
  EXPECT_EQ(PeerAddress("fd:12"), "fd:12");
  EXPECT_EQ(PeerAddress("unix:/tmp/x"), "unix:/tmp/x");
  EXPECT_EQ(PeerAddress("ipv4:"), "ipv4:");
}

}  // namespace
}  // namespace mt::control
