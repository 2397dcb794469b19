#include "runtime/time/timer_driver.h"

#include <atomic>
#include <chrono>
#include <memory>

#include "gtest/gtest.h"
#include "runtime/testing/test_tasks.h"

namespace mt::runtime::time {
namespace {

using std::chrono::milliseconds;
using testing::CountingTask;
using testing::QueueExecutor;
using Clock = TimerDriver::Clock;

struct Fixture {
  std::atomic<int> unparks{0};
  TimerDriver timers{[this] { unparks.fetch_add(1); }};
  QueueExecutor executor;
  std::atomic<int> polls{0};
  std::atomic<int> destroyed{0};
  CountingTask* NewTask() {
    auto* t = new CountingTask(&polls, &destroyed, 1, false);
    t->set_executor(&executor);
    return t;
  }
};

TEST(TimerDriverTest, FiresOnlyOnceDue) {
  Fixture f;
  TimerEntry e;
  CountingTask* t = f.NewTask();
  const auto now = Clock::now();
  f.timers.Arm(&e, now + milliseconds(20), t);
  EXPECT_EQ(f.timers.pending(), 1u);
  EXPECT_EQ(f.timers.ProcessExpired(now + milliseconds(10)), 0u);
  EXPECT_EQ(f.executor.size(), 0u);
  EXPECT_EQ(f.timers.ProcessExpired(now + milliseconds(22)), 1u);
  EXPECT_EQ(f.executor.size(), 1u);
  EXPECT_EQ(f.executor.last_kind(), task::ScheduleKind::kIo);
  EXPECT_FALSE(f.timers.Cancel(&e));  // Already fired.
  f.executor.RunAll();
  t->Unref();
  EXPECT_EQ(f.destroyed.load(), 1);
}

// Deadlines at and near the clock's end (a delay of inf or 1e10 s from
// Python) stay armed: they neither fire nor hold up a timer armed after
// them, and the driver sleeps until the near one.
TEST(TimerDriverTest, FarDeadlinesNeverFireEarly) {
  Fixture f;
  TimerEntry never, far, soon;
  CountingTask* t1 = f.NewTask();
  CountingTask* t2 = f.NewTask();
  CountingTask* t3 = f.NewTask();
  const auto now = Clock::now();
  f.timers.Arm(&never, Clock::time_point::max(), t1);
  f.timers.Arm(&far, Clock::time_point::max() - std::chrono::hours(1), t2);
  f.timers.Arm(&soon, now + milliseconds(20), t3);
  EXPECT_EQ(f.executor.size(), 0u);
  const auto sleep = f.timers.PrepareToSleep(now);
  ASSERT_TRUE(sleep.has_value());
  EXPECT_LE(*sleep, milliseconds(21));
  f.timers.AwakeFromSleep();
  EXPECT_EQ(f.timers.ProcessExpired(now + milliseconds(25)), 1u);
  // Hundreds of years on: neither far one is due yet.
  EXPECT_EQ(f.timers.ProcessExpired(now + std::chrono::hours(24 * 365 * 200)), 0u);
  EXPECT_EQ(f.timers.pending(), 2u);
  EXPECT_TRUE(f.timers.Cancel(&never));
  EXPECT_TRUE(f.timers.Cancel(&far));
  f.executor.RunAll();
  for (CountingTask* t : {t1, t2, t3}) t->Unref();
  EXPECT_EQ(f.destroyed.load(), 3);
}

TEST(TimerDriverTest, CancelDisarmsAndReleasesReference) {
  Fixture f;
  TimerEntry e;
  CountingTask* t = f.NewTask();
  f.timers.Arm(&e, Clock::now() + milliseconds(5), t);
  EXPECT_TRUE(f.timers.Cancel(&e));
  EXPECT_FALSE(f.timers.Cancel(&e));
  EXPECT_EQ(f.timers.pending(), 0u);
  EXPECT_EQ(f.timers.ProcessExpired(Clock::now() + milliseconds(50)), 0u);
  t->Unref();
  EXPECT_EQ(f.destroyed.load(), 1);
}

TEST(TimerDriverTest, PastDeadlineWakesAtOnce) {
  Fixture f;
  TimerEntry e;
  CountingTask* t = f.NewTask();
  f.timers.Arm(&e, Clock::now() - milliseconds(5), t);
  EXPECT_EQ(f.executor.size(), 1u);
  EXPECT_EQ(f.timers.pending(), 0u);
  f.executor.RunAll();
  t->Unref();
}

// After Shutdown nothing processes the wheel: a timer armed then (a loop of
// a runtime that has stopped) must not hold its task forever; it is woken
// at once, for the stopped scheduler to cancel.
TEST(TimerDriverTest, ArmAfterShutdownHoldsNothing) {
  Fixture f;
  TimerEntry e;
  CountingTask* t = f.NewTask();
  f.timers.Shutdown();
  f.timers.Arm(&e, Clock::now() + milliseconds(50), t);
  EXPECT_EQ(f.timers.pending(), 0u);
  EXPECT_EQ(f.executor.size(), 1u);
  f.executor.RunAll();
  t->Unref();
  EXPECT_EQ(f.destroyed.load(), 1);
}

TEST(TimerDriverTest, DriverWokenOnlyForEarlierDeadline) {
  Fixture f;
  TimerEntry a, b, c;
  CountingTask* t = f.NewTask();
  const auto now = Clock::now();
  f.timers.Arm(&a, now + milliseconds(100), t);
  EXPECT_EQ(f.unparks.load(), 0);  // Nobody sleeps yet.
  auto wait = f.timers.PrepareToSleep(now);
  ASSERT_TRUE(wait.has_value());
  EXPECT_LE(*wait, milliseconds(101));
  f.timers.Arm(&b, now + milliseconds(200), t);  // Later: no wake.
  EXPECT_EQ(f.unparks.load(), 0);
  f.timers.Arm(&c, now + milliseconds(10), t);  // Earlier: wake.
  EXPECT_EQ(f.unparks.load(), 1);
  f.timers.AwakeFromSleep();
  f.timers.Cancel(&a);
  f.timers.Cancel(&b);
  f.timers.Cancel(&c);
  t->Unref();
}

TEST(TimerDriverTest, EmptyWheelSleepsUntilWokenAndAnyTimerWakes) {
  Fixture f;
  EXPECT_EQ(f.timers.PrepareToSleep(Clock::now()), std::nullopt);
  TimerEntry e;
  CountingTask* t = f.NewTask();
  f.timers.Arm(&e, Clock::now() + milliseconds(1000), t);
  EXPECT_EQ(f.unparks.load(), 1);
  f.timers.Cancel(&e);
  t->Unref();
}

TEST(TimerDriverTest, ShutdownDropsEveryReference) {
  Fixture f;
  std::vector<std::unique_ptr<TimerEntry>> entries;
  for (int i = 0; i < 100; ++i) {
    entries.push_back(std::make_unique<TimerEntry>());
    CountingTask* t = f.NewTask();
    f.timers.Arm(entries.back().get(), Clock::now() + milliseconds(1000 + i), t);
    t->Unref();  // The timer holds the only reference now.
  }
  EXPECT_EQ(f.destroyed.load(), 0);
  f.timers.Shutdown();
  EXPECT_EQ(f.destroyed.load(), 100);
  EXPECT_EQ(f.timers.pending(), 0u);
  for (auto& e : entries) EXPECT_FALSE(f.timers.Cancel(e.get()));
}

}  // namespace
}  // namespace mt::runtime::time
