#include "runtime/metrics/histogram.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/metrics/cycle_clock.h"

namespace mt::runtime::metrics {
namespace {

TEST(DurationHistogramTest, BoundsAreInclusivePowersOfTwo) {
  DurationHistogram h;
  h.Record(0);
  h.Record(256);  // The first bound itself.
  h.Record(257);
  h.Record(512);
  h.Record(513);
  h.Record(
      DurationHistogram::UpperBoundNs(DurationHistogram::kFiniteBuckets - 1));
  h.Record(
      DurationHistogram::UpperBoundNs(DurationHistogram::kFiniteBuckets - 1) +
      1);
  h.Record(UINT64_MAX / 4);
  const DurationHistogram::Totals t = h.Read();
  EXPECT_EQ(t.counts[0], 2u);
  EXPECT_EQ(t.counts[1], 2u);
  EXPECT_EQ(t.counts[2], 1u);
  EXPECT_EQ(t.counts[DurationHistogram::kFiniteBuckets - 1], 1u);
  EXPECT_EQ(t.counts[DurationHistogram::kFiniteBuckets], 2u);  // +Inf.
  EXPECT_EQ(t.count, 8u);
}

TEST(DurationHistogramTest, SumsEveryThreadIncludingThoseBeyondTheSlots) {
  DurationHistogram h;
  constexpr int kThreads = kThreadSlots + 16;  // Some share the last shard.
  constexpr int kEach = 1000;
  for (int round = 0; round < 2; ++round) {  // Slots are reused.
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&h] {
        for (int k = 0; k < kEach; ++k) h.Record(1000);  // Bucket 2 (<= 1024).
      });
    }
    for (auto& t : threads) t.join();
  }
  const DurationHistogram::Totals t = h.Read();
  EXPECT_EQ(t.counts[2], 2u * kThreads * kEach);
  EXPECT_EQ(t.count, 2u * kThreads * kEach);
  EXPECT_EQ(t.sum_ns, 2u * kThreads * kEach * 1000);
}

TEST(DurationHistogramTest, LiveThreadsHoldDistinctSlots) {
  std::set<int> slots;
  std::vector<int> seen(8);
  std::vector<std::thread> threads;
  std::atomic<int> arrived{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      seen[i] = ThreadSlot();
      arrived.fetch_add(1);
      while (arrived.load() < 8)
        std::this_thread::yield();  // All alive at once.
    });
  }
  for (auto& t : threads) t.join();
  slots.insert(seen.begin(), seen.end());
  EXPECT_EQ(slots.size(), 8u);
}

TEST(CycleClockTest, FastConversionAgreesWithTheMeasuredRate) {
  CycleClock::Anchor();
  const std::uint64_t start = CycleClock::Now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t cycles = CycleClock::Now() - start;
  const double slow = CycleClock::ToNs(cycles);
  const double fast = static_cast<double>(CycleClock::ToNsFast(cycles));
  EXPECT_NEAR(fast / slow, 1.0, 0.05);
  EXPECT_GT(slow, 19e6);
}

}  // namespace
}  // namespace mt::runtime::metrics
