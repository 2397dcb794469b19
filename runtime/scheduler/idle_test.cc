#include "runtime/scheduler/idle.h"

#include "gtest/gtest.h"

namespace mt::runtime::scheduler {
namespace {

TEST(IdleTest, NobodyToWakeWhileAllUnparked) {
  Idle idle(2);
  EXPECT_EQ(idle.WorkerToNotify(false), std::nullopt);
  EXPECT_EQ(idle.WorkerToNotify(true), std::nullopt);
}

TEST(IdleTest, WakesOneSleeperAsSearching) {
  Idle idle(2);
  EXPECT_FALSE(idle.TransitionWorkerToParked(1, false));
  EXPECT_EQ(idle.num_unparked(), 1u);
  EXPECT_TRUE(idle.IsParked(1));
  EXPECT_EQ(idle.WorkerToNotify(false), 1u);
  EXPECT_FALSE(idle.IsParked(1));
  EXPECT_EQ(idle.num_unparked(), 2u);
  EXPECT_EQ(idle.num_searching(), 1u);
}

TEST(IdleTest, SearcherThrottlesWakeupsButIoIgnoresIt) {
  Idle idle(3);
  idle.TransitionWorkerToParked(1, false);
  idle.TransitionWorkerToParked(2, false);
  ASSERT_TRUE(idle.TransitionWorkerToSearching());  // Worker 0 searches.
  EXPECT_EQ(idle.WorkerToNotify(false), std::nullopt);
  EXPECT_TRUE(idle.WorkerToNotify(true).has_value());
}

TEST(IdleTest, AtMostHalfSearch) {
  Idle idle(4);
  EXPECT_TRUE(idle.TransitionWorkerToSearching());
  EXPECT_TRUE(idle.TransitionWorkerToSearching());
  EXPECT_FALSE(idle.TransitionWorkerToSearching());
  EXPECT_FALSE(idle.TransitionWorkerFromSearching());
  EXPECT_TRUE(idle.TransitionWorkerFromSearching());  // The last one.
}

TEST(IdleTest, LastSearcherParkingIsReported) {
  Idle idle(2);
  ASSERT_TRUE(idle.TransitionWorkerToSearching());
  EXPECT_TRUE(idle.TransitionWorkerToParked(0, true));
  EXPECT_EQ(idle.num_searching(), 0u);
}

TEST(IdleTest, SelfUnparkRaceWithProducer) {
  Idle idle(2);
  idle.TransitionWorkerToParked(0, false);
  EXPECT_EQ(idle.WorkerToNotify(false), 0u);
  // The worker also found work of its own: the producer got there first.
  EXPECT_FALSE(idle.UnparkWorkerById(0));
  idle.TransitionWorkerToParked(1, false);
  EXPECT_TRUE(idle.UnparkWorkerById(1));
  EXPECT_EQ(idle.num_unparked(), 2u);
}

TEST(IdleTest, ExcludedWorkerIsNotPicked) {
  Idle idle(2);
  idle.TransitionWorkerToParked(0, false);
  EXPECT_EQ(idle.WorkerToNotify(true, 0), std::nullopt);
  idle.TransitionWorkerToParked(1, false);
  EXPECT_EQ(idle.WorkerToNotify(true, 1), 0u);
}

TEST(IdleTest, ResizeChangesWorkerCount) {
  Idle idle(1);
  idle.AddWorker();
  EXPECT_EQ(idle.num_workers(), 2u);
  EXPECT_EQ(idle.num_unparked(), 2u);
  idle.RemoveWorker();
  EXPECT_EQ(idle.num_workers(), 1u);
  EXPECT_EQ(idle.num_unparked(), 1u);
}

}  // namespace
}  // namespace mt::runtime::scheduler
