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

// Advances the way the driver does, from one expiration to the next,
// until `e` fires; returns the tick it fired at (0: not by `limit`).
std::uint64_t AdvanceUntilFired(Wheel& wheel, TimerEntry* e, std::uint64_t limit) {
  std::vector<TimerEntry*> out;
  for (int wakeups = 0; wakeups < 10'000; ++wakeups) {
    const auto next = wheel.NextExpiration();
    if (!next || *next > limit) return 0;
    // The driver never wakes for a slot already behind it.
    EXPECT_GE(*next, wheel.elapsed());
    out.clear();
    wheel.Advance(*next, out);
    if (std::find(out.begin(), out.end(), e) != out.end()) return *next;
  }
  ADD_FAILURE() << "the wheel kept waking without progress";
  return 0;
}

// Deadlines past the horizon are kept, not clamped, and fire exactly when
// due, whatever "now" is within the top level's turn (the old clamp filed
// an entry one whole turn ahead into now's own top-level slot: it fired at
// once, or was re-filed there forever and stalled every later timer).
TEST(WheelTest, DeadlinesPastTheHorizonFireOnTime) {
  const std::uint64_t top_slot = std::uint64_t{1} << (Wheel::kSlotBits * (Wheel::kLevels - 1));
  const std::uint64_t turn = top_slot << Wheel::kSlotBits;
  for (std::uint64_t start : {std::uint64_t{0}, std::uint64_t{1}, top_slot - 1, top_slot,
                              turn - top_slot + 3, turn - 1, 5 * turn + 12345}) {
    for (std::uint64_t delay : {Wheel::kHorizon, Wheel::kHorizon + 1, turn - 1, turn,
                                turn + 1, 3 * turn + 77}) {
      Wheel wheel;
      std::vector<TimerEntry*> out;
      wheel.Advance(start, out);
      TimerEntry far, near;
      ASSERT_TRUE(wheel.Insert(&far, start + delay));
      ASSERT_TRUE(wheel.Insert(&near, start + 10));
      EXPECT_EQ(far.deadline_tick(), start + delay);
      // A near timer armed beside it still fires on time.
      EXPECT_EQ(AdvanceUntilFired(wheel, &near, start + 10), start + 10)
          << "start " << start << " delay " << delay;
      EXPECT_EQ(AdvanceUntilFired(wheel, &far, ~std::uint64_t{0}), start + delay)
          << "start " << start << " delay " << delay;
      EXPECT_EQ(wheel.size(), 0u);
    }
  }
}

// A deadline of "never" stays armed across many horizons and never makes
// the wheel spin: each wakeup moves time a horizon on.
TEST(WheelTest, NeverDeadlineStaysArmed) {
  Wheel wheel;
  TimerEntry never, soon;
  ASSERT_TRUE(wheel.Insert(&never, ~std::uint64_t{0}));
  std::vector<TimerEntry*> out;
  std::uint64_t last = 0;
  for (int turn = 0; turn < 50; ++turn) {
    const auto next = wheel.NextExpiration();
    ASSERT_TRUE(next.has_value());
    ASSERT_GT(*next, last);
    last = *next;
    wheel.Advance(*next, out);
    ASSERT_TRUE(out.empty()) << "fired at " << *next;
    ASSERT_EQ(wheel.size(), 1u);
    // Timers armed after it are not held up by it.
    const std::uint64_t soon_at = wheel.elapsed() + 3;
    ASSERT_TRUE(wheel.Insert(&soon, soon_at));
    EXPECT_EQ(AdvanceUntilFired(wheel, &soon, soon_at), soon_at);
    out.clear();
  }
  EXPECT_GT(wheel.elapsed(), 40 * Wheel::kHorizon);
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
      // Mostly near deadlines, some far ones across every level and
      // past the horizon.
      const std::uint64_t span = (rng() % 4 == 0) ? (1ull << (rng() % 48)) : 200;
      const std::uint64_t deadline = now + 1 + rng() % span;
      ASSERT_TRUE(wheel.Insert(e, deadline));
      armed[e] = deadline;
    } else if (op < 7) {
      if (!armed.count(e)) continue;
      wheel.Remove(e);
      armed.erase(e);
    } else {
      const int jump = static_cast<int>(rng() % 16);
      now += rng() % (jump == 0 ? (1ull << 44) : jump < 3 ? 100000 : 50);
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
