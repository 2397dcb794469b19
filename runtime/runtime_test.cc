#include "runtime/runtime.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/testing/notification.h"
#include "gtest/gtest.h"

namespace mt::runtime {
namespace {

using admin::RuntimeState;

TEST(ConfigTest, ZeroWorkersMeansCpusPlusFour) {
  Config config;
  EXPECT_GE(ResolveWorkerThreads(config), 5u);
  config.worker_threads = 3;
  EXPECT_EQ(ResolveWorkerThreads(config), 3u);
}

TEST(RuntimeTest, StateFollowsLifecycle) {
  Config config;
  config.worker_threads = 2;
  Runtime rt(config);
  EXPECT_EQ(rt.state(), RuntimeState::kCreated);
  ASSERT_TRUE(rt.Start().ok());
  EXPECT_EQ(rt.state(), RuntimeState::kRunning);
  EXPECT_FALSE(rt.Start().ok());
  rt.Shutdown();
  EXPECT_EQ(rt.state(), RuntimeState::kStopped);
  rt.Shutdown();
  EXPECT_EQ(rt.state(), RuntimeState::kStopped);
  EXPECT_FALSE(rt.Spawn([] {}).ok());
}

TEST(RuntimeTest, SnapshotReportsWorkersAndWork) {
  Config config;
  config.worker_threads = 2;
  config.blocking_threads_max = 7;
  Runtime rt(config);
  ASSERT_TRUE(rt.Start().ok());
  constexpr int kUnits = 1000;
  std::atomic<int> ran{0};
  testing::Notification all_ran;
  for (int i = 0; i < kUnits; ++i) {
    ASSERT_TRUE(rt.Spawn([&] {
                    if (ran.fetch_add(1) + 1 == kUnits) all_ran.Notify();
                  })
                    .ok());
  }
  ASSERT_TRUE(all_ran.WaitFor(std::chrono::seconds(10)));
  const admin::RuntimeSnapshot snap = rt.Snapshot();
  EXPECT_EQ(snap.state, RuntimeState::kRunning);
  EXPECT_EQ(snap.worker_threads, 2u);
  EXPECT_EQ(snap.config.blocking_threads_max, 7u);
  ASSERT_EQ(snap.workers.size(), 2u);
  std::uint64_t total = 0;
  for (const auto& w : snap.workers) total += w.units_run;
  // A worker bumps its counter just after the unit returns, so the last
  // few may not be counted yet; they must all be after shutdown.
  EXPECT_LE(total, static_cast<std::uint64_t>(kUnits));
  EXPECT_GE(snap.uptime_seconds, 0.0);
  rt.Shutdown();
  total = 0;
  for (const auto& w : rt.Snapshot().workers) total += w.units_run;
  EXPECT_EQ(total, static_cast<std::uint64_t>(kUnits));
  EXPECT_EQ(rt.Snapshot().live_workers, 0u);
}

TEST(RuntimeTest, SnapshotFromAnotherThreadWhileWorkersAreBusy) {
  Config config;
  config.worker_threads = 2;
  Runtime rt(config);
  ASSERT_TRUE(rt.Start().ok());
  testing::Notification release;
  std::atomic<int> busy{0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(rt.Spawn([&] {
                    busy.fetch_add(1);
                    release.WaitFor(std::chrono::seconds(10));
                  })
                    .ok());
  }
  while (busy.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Both workers are blocked: the snapshot must still answer.
  const admin::RuntimeSnapshot snap = rt.Snapshot();
  EXPECT_EQ(snap.live_workers, 2u);
  release.Notify();
  rt.Shutdown();
}

TEST(RuntimeStateNameTest, NamesEveryState) {
  EXPECT_EQ(admin::RuntimeStateName(RuntimeState::kCreated), "created");
  EXPECT_EQ(admin::RuntimeStateName(RuntimeState::kRunning), "running");
  EXPECT_EQ(admin::RuntimeStateName(RuntimeState::kStopping), "stopping");
  EXPECT_EQ(admin::RuntimeStateName(RuntimeState::kStopped), "stopped");
}

}  // namespace
}  // namespace mt::runtime
