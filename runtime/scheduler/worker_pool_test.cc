#include "runtime/scheduler/worker_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/testing/notification.h"
#include "gtest/gtest.h"

namespace mt::runtime::scheduler {
namespace {

using std::chrono::seconds;

constexpr std::chrono::milliseconds kWait = std::chrono::seconds(10);

TEST(WorkerPoolTest, RunsEverySpawnedUnitExactlyOnce) {
  constexpr int kUnits = 20000;
  std::vector<std::atomic<int>> runs(kUnits);
  WorkerPool pool(4, "test", {});
  ASSERT_TRUE(pool.Start().ok());
  for (int i = 0; i < kUnits; ++i) {
    ASSERT_TRUE(pool.Spawn([&runs, i] { runs[i].fetch_add(1); }).ok());
  }
  pool.Shutdown();  // Drains before joining.
  for (int i = 0; i < kUnits; ++i) ASSERT_EQ(runs[i].load(), 1) << i;
  std::uint64_t total = 0;
  for (std::size_t w = 0; w < pool.size(); ++w) total += pool.stats(w).units_run;
  EXPECT_EQ(total, static_cast<std::uint64_t>(kUnits));
}

TEST(WorkerPoolTest, ManyProducersLoseNothing) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 5000;
  std::atomic<int> ran{0};
  WorkerPool pool(2, "test", {});
  ASSERT_TRUE(pool.Start().ok());
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < kPerProducer; ++i) {
        ASSERT_TRUE(pool.Spawn([&ran] { ran.fetch_add(1); }).ok());
      }
    });
  }
  for (std::thread& t : producers) t.join();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), kProducers * kPerProducer);
}

TEST(WorkerPoolTest, HooksRunOnEveryWorkerThread) {
  constexpr std::size_t kWorkers = 3;
  std::mutex mu;
  std::set<std::size_t> started, stopped;
  std::set<std::thread::id> hook_threads;
  std::atomic<int> parks{0}, unparks{0};
  WorkerHooks hooks;
  hooks.on_start = [&](std::size_t i) {
    std::lock_guard<std::mutex> l(mu);
    started.insert(i);
    hook_threads.insert(std::this_thread::get_id());
  };
  hooks.on_stop = [&](std::size_t i) {
    std::lock_guard<std::mutex> l(mu);
    stopped.insert(i);
  };
  hooks.before_park = [&](std::size_t) { parks.fetch_add(1); };
  hooks.after_unpark = [&](std::size_t) { unparks.fetch_add(1); };
  {
    WorkerPool pool(kWorkers, "test", std::move(hooks));
    ASSERT_TRUE(pool.Start().ok());
    testing::Notification ran;
    ASSERT_TRUE(pool.Spawn([&] { ran.Notify(); }).ok());
    ASSERT_TRUE(ran.WaitFor(kWait));
    pool.Shutdown();
  }
  EXPECT_EQ(started, (std::set<std::size_t>{0, 1, 2}));
  EXPECT_EQ(stopped, (std::set<std::size_t>{0, 1, 2}));
  EXPECT_EQ(hook_threads.size(), kWorkers);
  EXPECT_FALSE(hook_threads.count(std::this_thread::get_id()));
  // Every park is paired with an unpark before the worker exits.
  EXPECT_EQ(parks.load(), unparks.load());
}

TEST(WorkerPoolTest, UnitsRunOnWorkerThreads) {
  WorkerPool pool(2, "test", {});
  ASSERT_TRUE(pool.Start().ok());
  EXPECT_FALSE(pool.IsWorkerThread());
  std::atomic<bool> on_worker{false};
  testing::Notification done;
  ASSERT_TRUE(pool.Spawn([&] {
                    on_worker = pool.IsWorkerThread();
                    done.Notify();
                  })
                  .ok());
  ASSERT_TRUE(done.WaitFor(kWait));
  EXPECT_TRUE(on_worker.load());
}

TEST(WorkerPoolTest, LifecycleMisuseIsRefused) {
  WorkerPool pool(1, "test", {});
  EXPECT_EQ(pool.Spawn([] {}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pool.Start().ok());
  EXPECT_EQ(pool.Start().code(), absl::StatusCode::kFailedPrecondition);
  pool.Shutdown();
  pool.Shutdown();  // Idempotent.
  EXPECT_EQ(pool.Spawn([] {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.live_workers(), 0u);
}

TEST(WorkerPoolTest, ZeroWorkersIsInvalid) {
  WorkerPool pool(0, "test", {});
  EXPECT_EQ(pool.Start().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkerPoolTest, ShutdownFromAWorkerStopsIntakeWithoutDeadlock) {
  WorkerPool pool(2, "test", {});
  ASSERT_TRUE(pool.Start().ok());
  testing::Notification done;
  ASSERT_TRUE(pool.Spawn([&] {
                    pool.Shutdown();
                    done.Notify();
                  })
                  .ok());
  ASSERT_TRUE(done.WaitFor(kWait));
  EXPECT_EQ(pool.Spawn([] {}).code(), absl::StatusCode::kFailedPrecondition);
  pool.Shutdown();  // The outside caller joins.
  EXPECT_EQ(pool.live_workers(), 0u);
}

TEST(WorkerPoolStressTest, StartStopCyclesUnderLoad) {
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> ran{0};
    WorkerPool pool(1 + round % 4, "stress", {});
    ASSERT_TRUE(pool.Start().ok());
    for (int i = 0; i < 500; ++i) {
      // Units spawn units, so some Spawns race with Shutdown below and may
      // be refused; every accepted one must still run.
      ASSERT_TRUE(pool.Spawn([&] {
                        ran.fetch_add(1);
                        if (pool.Spawn([&ran] { ran.fetch_add(1); }).ok()) {
                          ran.fetch_add(1000000);
                        }
                      })
                      .ok());
    }
    pool.Shutdown();
    const int accepted_children = ran.load() / 1000000;
    const int runs = ran.load() % 1000000;
    EXPECT_EQ(runs, 500 + accepted_children) << "round " << round;
  }
}

}  // namespace
}  // namespace mt::runtime::scheduler
