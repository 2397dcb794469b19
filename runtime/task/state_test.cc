#include "runtime/task/state.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/task/task.h"
#include "runtime/testing/test_tasks.h"

namespace mt::runtime::task {
namespace {

using testing::CountingTask;
using testing::QueueExecutor;

constexpr std::uint64_t Flags(std::uint64_t word) {
  return word & State::kFlagMask;
}

TEST(StateTest, NewIdleHasOneReferenceAndNoFlags) {
  State s;
  EXPECT_EQ(Flags(s.Load()), 0u);
  EXPECT_EQ(State::RefCount(s.Load()), 1u);
}

TEST(StateTest, NewScheduledIsScheduledWithOneReference) {
  State s(State::kNewScheduled);
  EXPECT_EQ(Flags(s.Load()), State::kScheduled);
  EXPECT_EQ(State::RefCount(s.Load()), 1u);
}

TEST(StateTest, WakeOfIdleSchedulesAndAddsReference) {
  State s;
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kSubmit);
  EXPECT_EQ(Flags(s.Load()), State::kScheduled);
  EXPECT_EQ(State::RefCount(s.Load()), 2u);
}

TEST(StateTest, WakeOfScheduledDoesNothing) {
  State s(State::kNewScheduled);
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kNone);
  EXPECT_EQ(State::RefCount(s.Load()), 1u);
}

TEST(StateTest, RunClearsScheduledAndSetsRunning) {
  State s(State::kNewScheduled);
  EXPECT_EQ(s.TransitionToRunning(), State::RunAction::kPoll);
  EXPECT_EQ(Flags(s.Load()), State::kRunning);
}

TEST(StateTest, WakeDuringRunIsRememberedOnce) {
  State s(State::kNewScheduled);
  s.TransitionToRunning();
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kNone);
  EXPECT_EQ(Flags(s.Load()), State::kRunning | State::kNotified);
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kNone);
  EXPECT_EQ(State::RefCount(s.Load()), 1u);  // No reference for a remembered wake.
  EXPECT_EQ(s.TransitionToIdle(), State::IdleAction::kReschedule);
  EXPECT_EQ(Flags(s.Load()), State::kScheduled);
}

TEST(StateTest, IdleWithoutWakeParks) {
  State s(State::kNewScheduled);
  s.TransitionToRunning();
  EXPECT_EQ(s.TransitionToIdle(), State::IdleAction::kIdle);
  EXPECT_EQ(Flags(s.Load()), 0u);
}

TEST(StateTest, CompleteIsTerminal) {
  State s(State::kNewScheduled);
  s.TransitionToRunning();
  s.TransitionToScheduled();  // Notified during the final run.
  s.TransitionToComplete();
  EXPECT_EQ(Flags(s.Load()), State::kComplete);
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kNone);
  EXPECT_EQ(s.Cancel(), State::WakeAction::kNone);
  EXPECT_EQ(Flags(s.Load()), State::kComplete);
}

TEST(StateTest, CompleteAndReleaseReportsLastReference) {
  State s(State::kNewScheduled);
  s.RefInc();  // Someone else holds the task too.
  s.TransitionToRunning();
  EXPECT_FALSE(s.TransitionToCompleteAndRelease());
  EXPECT_EQ(Flags(s.Load()), State::kComplete);
  EXPECT_EQ(State::RefCount(s.Load()), 1u);
  EXPECT_TRUE(s.RefDec());
}

TEST(StateTest, CancelOfIdleSchedulesIt) {
  State s;
  EXPECT_EQ(s.Cancel(), State::WakeAction::kSubmit);
  EXPECT_EQ(Flags(s.Load()), State::kScheduled | State::kCancelled);
  EXPECT_EQ(State::RefCount(s.Load()), 2u);
  EXPECT_EQ(s.TransitionToRunning(), State::RunAction::kCancel);
}

TEST(StateTest, CancelOfScheduledIsSeenByRunner) {
  State s(State::kNewScheduled);
  EXPECT_EQ(s.Cancel(), State::WakeAction::kNone);
  EXPECT_EQ(s.TransitionToRunning(), State::RunAction::kCancel);
}

TEST(StateTest, CancelDuringRunIsSeenAtIdle) {
  State s(State::kNewScheduled);
  s.TransitionToRunning();
  EXPECT_EQ(s.Cancel(), State::WakeAction::kNone);
  EXPECT_EQ(s.TransitionToIdle(), State::IdleAction::kCancel);
  EXPECT_TRUE(s.Load() & State::kRunning);  // Still owned by the runner.
}

TEST(StateTest, CancelTwiceSubmitsOnce) {
  State s;
  EXPECT_EQ(s.Cancel(), State::WakeAction::kSubmit);
  EXPECT_EQ(s.Cancel(), State::WakeAction::kNone);
}

TEST(StateTest, RefCountReportsLastRelease) {
  State s;
  s.RefInc();
  EXPECT_FALSE(s.RefDec());
  EXPECT_TRUE(s.RefDec());
}

TEST(StateTest, InspectionOfIdleExcludesASecondButNotWakes) {
  State s;
  EXPECT_TRUE(s.TryBeginInspection());
  EXPECT_FALSE(s.TryBeginInspection());
  EXPECT_EQ(s.TransitionToScheduled(), State::WakeAction::kSubmit);
  s.EndInspection();
  EXPECT_EQ(Flags(s.Load()), State::kScheduled);
  EXPECT_TRUE(s.TryBeginInspection());  // Queued but not running: allowed.
  s.EndInspection();
}

TEST(StateTest, InspectionRefusedWhileRunningOrComplete) {
  State s(State::kNewScheduled);
  s.TransitionToRunning();
  EXPECT_FALSE(s.TryBeginInspection());
  s.TransitionToComplete();
  EXPECT_FALSE(s.TryBeginInspection());
}

TEST(StateTest, RunnerWaitsForTheInspectionToEnd) {
  State s(State::kNewScheduled);
  ASSERT_TRUE(s.TryBeginInspection());
  std::atomic<bool> running{false};
  std::thread runner([&] {
    s.TransitionToRunning();
    running.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(running.load());
  s.EndInspection();
  runner.join();
  EXPECT_TRUE(running.load());
  EXPECT_EQ(Flags(s.Load()), State::kRunning);
}

TEST(StateDeathTest, DoubleReleaseAborts) {
  EXPECT_DEATH(
      {
        State s;
        s.RefDec();
        s.RefDec();
      },
      "");
}

TEST(TaskTest, RunTaskPollsOnceAndFreesFinishedTask) {
  std::atomic<int> polls{0}, destroyed{0};
  QueueExecutor ex;
  auto* t = new CountingTask(&polls, &destroyed, 1, /*scheduled=*/true);
  t->set_executor(&ex);
  RunTask(t);
  EXPECT_EQ(polls.load(), 1);
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(TaskTest, WakeDuringPollRequeuesAsYield) {
  std::atomic<int> polls{0}, destroyed{0};
  QueueExecutor ex;
  class SelfWaking final : public Task {
   public:
    explicit SelfWaking(std::atomic<int>* polls) : Task(true), polls_(polls) {}
    bool Poll() override {
      if (polls_->fetch_add(1) == 0) {
        Wake();  // During our own run: remembered, not run concurrently.
        return false;
      }
      return true;
    }
    std::atomic<int>* polls_;
  };
  auto* t = new SelfWaking(&polls);
  t->set_executor(&ex);
  RunTask(t);
  EXPECT_EQ(polls.load(), 1);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex.last_kind(), ScheduleKind::kYield);
  ex.RunAll();
  EXPECT_EQ(polls.load(), 2);
}

TEST(TaskTest, CompletedTaskIsNeverRunAgain) {
  std::atomic<int> polls{0}, destroyed{0};
  QueueExecutor ex;
  auto* t = new CountingTask(&polls, &destroyed, 1, true);
  t->set_executor(&ex);
  t->Ref();  // Keep it alive past completion.
  RunTask(t);
  t->Wake();
  t->Cancel();
  EXPECT_EQ(ex.size(), 0u);
  EXPECT_EQ(polls.load(), 1);
  t->Unref();
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(TaskTest, CancelOfIdleTaskRunsCancelPathNotPoll) {
  std::atomic<int> polls{0}, destroyed{0};
  QueueExecutor ex;
  auto* t = new CountingTask(&polls, &destroyed, 0, false);  // Never finishes.
  t->set_executor(&ex);
  t->Cancel();
  ASSERT_EQ(ex.size(), 1u);
  t->Ref();
  ex.RunAll();
  EXPECT_EQ(polls.load(), 0);
  EXPECT_TRUE(t->cancelled.load());
  EXPECT_TRUE(t->state().Load() & State::kComplete);
  t->Unref();  // Ours.
  t->Unref();  // The creator's.
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(TaskTest, FnTaskCancelledDropsClosureUnrun) {
  QueueExecutor ex;
  auto flag = std::make_shared<int>(0);
  std::weak_ptr<int> weak = flag;
  auto* t = new FnTask([flag = std::move(flag)] { *flag = 1; });
  t->set_executor(&ex);
  t->Cancel();  // Already scheduled: the runner sees the flag.
  RunTask(t);
  EXPECT_TRUE(weak.expired());
}

// Many threads wake one task that re-arms itself: it must never be polled
// by two threads at once, and the last wake must always be honoured.
// Counts polls and checks that none overlaps another poll or an
// inspection (set `inspecting` around one).
class ExclusivePolls final : public Task {
 public:
  ExclusivePolls() : Task(false) {}
  bool Poll() override {
    EXPECT_FALSE(inspecting.load());
    EXPECT_FALSE(inside.exchange(true));
    polls.fetch_add(1);
    inside.store(false);
    return false;
  }
  std::atomic<bool> inside{false};
  std::atomic<bool> inspecting{false};
  std::atomic<int> polls{0};
};

// A wake after all the others must still lead to one more poll.
void ExpectLastWakePolls(ExclusivePolls* t) {
  const int before = t->polls.load();
  t->Wake();
  for (int i = 0; i < 2000 && t->polls.load() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(t->polls.load(), before);
}

TEST(TaskTest, ConcurrentWakesNeverOverlapAndNeverGetLost) {
  QueueExecutor ex;
  auto* t = new ExclusivePolls();
  t->set_executor(&ex);
  std::atomic<bool> stop{false};
  std::vector<std::thread> wakers;
  for (int i = 0; i < 3; ++i) {
    wakers.emplace_back([&] {
      for (int k = 0; k < 20000; ++k) t->Wake();
    });
  }
  std::thread runner([&] {
    while (!stop.load()) {
      if (Task* next = ex.Pop()) RunTask(next);
    }
  });
  for (auto& w : wakers) w.join();
  ExpectLastWakePolls(t);
  stop.store(true);
  runner.join();
  ex.RunAll();
  EXPECT_EQ(Flags(t->state().Load()), 0u);
  t->Unref();
}

TEST(TaskTest, InspectionsNeverOverlapPollsUnderConcurrentWakes) {
  QueueExecutor ex;
  auto* t = new ExclusivePolls();
  t->set_executor(&ex);
  std::atomic<bool> stop{false};
  std::atomic<int> inspections{0};
  std::thread waker([&] {
    // At least 20000 wakes, and on until the inspector got in once (on a
    // loaded machine it may not be scheduled before 20000 are done),
    // bounded by 10 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int k = 0; k < 20000 || (inspections.load() == 0 &&
                                  std::chrono::steady_clock::now() < deadline);
         ++k) {
      t->Wake();
    }
  });
  std::thread inspector([&] {
    while (!stop.load()) {
      if (!t->state().TryBeginInspection()) continue;
      t->inspecting.store(true);
      EXPECT_FALSE(t->inside.load());
      t->inspecting.store(false);
      t->state().EndInspection();
      inspections.fetch_add(1);
    }
  });
  std::thread runner([&] {
    while (!stop.load()) {
      if (Task* next = ex.Pop()) RunTask(next);
    }
  });
  waker.join();
  ExpectLastWakePolls(t);
  stop.store(true);
  inspector.join();
  runner.join();
  ex.RunAll();
  EXPECT_GT(inspections.load(), 0);
  EXPECT_EQ(Flags(t->state().Load()), 0u);
  t->Unref();
}

}  // namespace
}  // namespace mt::runtime::task
