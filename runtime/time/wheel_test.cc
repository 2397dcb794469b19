#include "runtime/time/wheel.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace mt::runtime::time {
namespace {

TEST(WheelTest, DueDeadlineIsRefused) {
  Wheel wheel;
  TimerEntry e;
  EXPECT_FALSE(wheel.Insert(&e, 0));
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(WheelTest, FiresAtDeadlineNotBefore) {
  Wheel wheel;
  TimerEntry e;
  ASSERT_TRUE(wheel.Insert(&e, 5));
  EXPECT_EQ(wheel.NextExpiration(), 5u);
  std::vector<TimerEntry*> out;
  wheel.Advance(4, out);
  EXPECT_TRUE(out.empty());
  wheel.Advance(5, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], &e);
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_EQ(wheel.NextExpiration(), std::nullopt);
}

TEST(WheelTest, RemoveIsImmediateAndEmptiesSlot) {
  Wheel wheel;
  TimerEntry a, b;
  wheel.Insert(&a, 10);
  wheel.Insert(&b, 10);
  wheel.Remove(&a);
  EXPECT_EQ(wheel.size(), 1u);
  wheel.Remove(&b);
  EXPECT_EQ(wheel.NextExpiration(), std::nullopt);
  std::vector<TimerEntry*> out;
  wheel.Advance(100, out);
  EXPECT_TRUE(out.empty());
  wheel.Remove(&a);  // Not linked: a no-op.
}

TEST(WheelTest, CascadesFromHigherLevels) {
  Wheel wheel;
  TimerEntry near, mid, far;
  wheel.Insert(&near, 70);          // Level 1.
  wheel.Insert(&mid, 5'000);        // Level 2.
  wheel.Insert(&far, 20'000'000);   // Level 4.
  std::vector<TimerEntry*> out;
  wheel.Advance(69, out);
  EXPECT_TRUE(out.empty());
  wheel.Advance(70, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], &near);
  wheel.Advance(4'999, out);
  EXPECT_EQ(out.size(), 1u);
  wheel.Advance(5'000, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], &mid);
  wheel.Advance(19'999'999, out);
  EXPECT_EQ(out.size(), 2u);
  wheel.Advance(20'000'000, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2], &far);
}

TEST(WheelTest, FarDeadlinesAreClamped) {
  Wheel wheel;
  TimerEntry e;
  ASSERT_TRUE(wheel.Insert(&e, ~std::uint64_t{0} - 5));
  EXPECT_EQ(e.deadline_tick(), Wheel::kMaxDuration);
}

// Random inserts, removes and advances against a brute-force model: every
// entry fires exactly at the first Advance whose tick is >= its deadline.
TEST(WheelTest, MatchesModelUnderRandomOperations) {
  std::mt19937_64 rng(12345);
  Wheel wheel;
  constexpr int kEntries = 4000;
  std::vector<std::unique_ptr<TimerEntry>> entries;
  std::map<TimerEntry*, std::uint64_t> armed;
  for (int i = 0; i < kEntries; ++i) entries.push_back(std::make_unique<TimerEntry>());
  std::uint64_t now = 0;
  std::vector<TimerEntry*> out;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    TimerEntry* e = entries[rng() % kEntries].get();
    if (op < 5) {
      if (armed.count(e)) continue;
      // Mostly near deadlines, some far ones across every level.
      const std::uint64_t span = (rng() % 4 == 0) ? (1ull << (rng() % 30)) : 200;
      const std::uint64_t deadline = now + 1 + rng() % span;
      ASSERT_TRUE(wheel.Insert(e, deadline));
      armed[e] = deadline;
    } else if (op < 7) {
      if (!armed.count(e)) continue;
      wheel.Remove(e);
      armed.erase(e);
    } else {
      now += rng() % ((rng() % 8 == 0) ? 100000 : 50);
      out.clear();
      wheel.Advance(now, out);
      std::set<TimerEntry*> fired(out.begin(), out.end());
      ASSERT_EQ(fired.size(), out.size());
      for (auto it = armed.begin(); it != armed.end();) {
        const bool due = it->second <= now;
        ASSERT_EQ(due, fired.count(it->first) == 1)
            << "deadline " << it->second << " now " << now;
        it = due ? armed.erase(it) : std::next(it);
      }
      ASSERT_EQ(wheel.size(), armed.size());
      if (!armed.empty()) {
        std::uint64_t earliest = ~std::uint64_t{0};
        for (auto& [_, d] : armed) earliest = std::min(earliest, d);
        const auto next = wheel.NextExpiration();
        ASSERT_TRUE(next.has_value());
        // The wheel may wake early for a cascade, never late.
        EXPECT_LE(*next, earliest);
      }
    }
  }
  std::vector<TimerEntry*> rest;
  wheel.DrainAll(rest);
  EXPECT_EQ(rest.size(), armed.size());
  EXPECT_EQ(wheel.size(), 0u);
}

}  // namespace
}  // namespace mt::runtime::time
