#include "runtime/blocking/pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/testing/notification.h"

namespace mt::runtime::blocking {
namespace {

using std::chrono::milliseconds;
using testing::Notification;

// Polls `pred` for up to five seconds: every wait in a test is bounded.
template <typename Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 5000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return pred();
}

// A latch the jobs block on until the test opens it.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(BlockingPoolTest, ThreadsAreSpawnedOnDemandUpToMax) {
  BlockingPool pool({.max_threads = 3, .idle_ttl = milliseconds(10'000)});
  EXPECT_EQ(pool.Stats().threads, 0u);
  Gate gate;
  std::atomic<int> started{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.Spawn([&] {
                      started.fetch_add(1);
                      gate.Wait();
                    }).ok());
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == 3; }));
  BlockingPoolStats s = pool.Stats();
  EXPECT_EQ(s.threads, 3u);
  EXPECT_EQ(s.running, 3u);
  EXPECT_EQ(s.queued, 2u);
  gate.Open();
  ASSERT_TRUE(Eventually([&] { return pool.Stats().completed == 5; }));
  EXPECT_TRUE(pool.IsIdle());
}

TEST(BlockingPoolTest, QueueIsFifo) {
  BlockingPool pool({.max_threads = 1, .idle_ttl = milliseconds(10'000)});
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(pool.Spawn([&, i] {
                      std::lock_guard<std::mutex> lock(mu);
                      order.push_back(i);
                    }).ok());
  }
  ASSERT_TRUE(Eventually([&] { return pool.Stats().completed == 50; }));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(BlockingPoolTest, CancelWorksOnlyBeforeStart) {
  BlockingPool pool({.max_threads = 1, .idle_ttl = milliseconds(10'000)});
  Gate gate;
  Notification running;
  auto first = pool.Spawn([&] {
    running.Notify();
    gate.Wait();
  });
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(running.WaitFor(milliseconds(5000)));
  bool ran = false, cancelled = false;
  auto second = pool.Spawn([&] { ran = true; }, [&] { cancelled = true; });
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(first->Cancel());  // Already running.
  EXPECT_TRUE(second->Cancel());
  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(second->Cancel());
  gate.Open();
  ASSERT_TRUE(Eventually([&] { return pool.IsIdle(); }));
  EXPECT_FALSE(ran);
  EXPECT_EQ(pool.Stats().cancelled, 1u);
}

TEST(BlockingPoolTest, IdleThreadsRetireAfterTtl) {
  BlockingPool pool({.max_threads = 4, .idle_ttl = milliseconds(30)});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Spawn([] {}).ok());
  ASSERT_TRUE(Eventually([&] { return pool.Stats().completed == 4; }));
  EXPECT_TRUE(Eventually([&] { return pool.Stats().threads == 0; }));
  // And come back on demand.
  Notification done;
  ASSERT_TRUE(pool.Spawn([&] { done.Notify(); }).ok());
  EXPECT_TRUE(done.WaitFor(milliseconds(5000)));
}

TEST(BlockingPoolTest, LoweringTheIdleTtlRetiresThreadsAlreadyIdle) {
  BlockingPool pool({.max_threads = 2, .idle_ttl = milliseconds(600'000)});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(pool.Spawn([] {}).ok());
  ASSERT_TRUE(Eventually([&] { return pool.Stats().completed == 2; }));
  EXPECT_GE(pool.Stats().threads, 1u);  // Idle, with ten minutes to go.
  ASSERT_TRUE(pool.SetIdleTtl(milliseconds(20)).ok());
  EXPECT_EQ(pool.Stats().idle_ttl, milliseconds(20));
  EXPECT_TRUE(Eventually([&] { return pool.Stats().threads == 0; }));
  EXPECT_EQ(pool.SetIdleTtl(milliseconds(0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockingPoolTest, ShrinkingNeverInterruptsRunningWork) {
  BlockingPool pool({.max_threads = 4, .idle_ttl = milliseconds(10'000)});
  Gate gate;
  std::atomic<int> started{0}, finished{0};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.Spawn([&] {
                      started.fetch_add(1);
                      gate.Wait();
                      finished.fetch_add(1);
                    }).ok());
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == 4; }));
  ASSERT_TRUE(pool.SetMaxThreads(1).ok());
  EXPECT_EQ(pool.Stats().max_threads, 1u);
  EXPECT_EQ(pool.Stats().running, 4u);  // Nobody interrupted.
  std::atomic<int> later{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Spawn([&] { later.fetch_add(1); }).ok());
  }
  gate.Open();
  ASSERT_TRUE(Eventually([&] { return later.load() == 3; }));
  EXPECT_EQ(finished.load(), 4);
  EXPECT_TRUE(Eventually([&] { return pool.Stats().threads == 1; }));
  EXPECT_EQ(pool.SetMaxThreads(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockingPoolTest, GrowingStartsThreadsForQueuedWork) {
  BlockingPool pool({.max_threads = 1, .idle_ttl = milliseconds(10'000)});
  Gate gate;
  std::atomic<int> started{0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Spawn([&] {
                      started.fetch_add(1);
                      gate.Wait();
                    }).ok());
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == 1; }));
  ASSERT_TRUE(pool.SetMaxThreads(3).ok());
  EXPECT_TRUE(Eventually([&] { return started.load() == 3; }));
  gate.Open();
}

TEST(BlockingPoolTest, ShutdownCancelsQueuedAndWaitsForRunning) {
  std::atomic<int> cancelled{0}, finished{0};
  Gate gate;
  Notification running;
  BlockingPool pool({.max_threads = 1, .idle_ttl = milliseconds(10'000)});
  ASSERT_TRUE(pool.Spawn([&] {
                    running.Notify();
                    gate.Wait();
                    finished.fetch_add(1);
                  }).ok());
  ASSERT_TRUE(running.WaitFor(milliseconds(5000)));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.Spawn([] {}, [&] { cancelled.fetch_add(1); }).ok());
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(20));
    gate.Open();
  });
  pool.Shutdown();
  opener.join();
  EXPECT_EQ(finished.load(), 1);
  EXPECT_EQ(cancelled.load(), 5);
  EXPECT_EQ(pool.Stats().threads, 0u);
  EXPECT_EQ(pool.Spawn([] {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  pool.Shutdown();  // Idempotent.
}

TEST(BlockingPoolTest, ConcurrentSpawnCancelAndResize) {
  BlockingPool pool({.max_threads = 8, .idle_ttl = milliseconds(5)});
  std::atomic<int> ran{0}, cancelled{0};
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto h = pool.Spawn([&] { ran.fetch_add(1); },
                            [&] { cancelled.fetch_add(1); });
        ASSERT_TRUE(h.ok());
        if (i % 3 == t) h->Cancel();
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(pool.SetMaxThreads(1 + i % 8).ok());
      std::this_thread::yield();
    }
  });
  for (auto& t : threads) t.join();
  ASSERT_TRUE(Eventually([&] { return pool.IsIdle(); }));
  EXPECT_EQ(ran.load() + cancelled.load(), 3 * kPerThread);
  pool.Shutdown();
}

}  // namespace
}  // namespace mt::runtime::blocking
