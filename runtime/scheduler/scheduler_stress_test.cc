// Bounded stress loops for the scheduler: millions of units, wake storms,
// resize storms and shutdown under load. Sizes shrink under the sanitizers
// so CI's TSan/ASan runs stay within minutes; every wait is bounded.

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "runtime/testing/test_tasks.h"

namespace mt::runtime {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;
using testing::LambdaTask;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kScale = 2;
#else
constexpr int kScale = 1;
#endif

Config StressConfig(std::size_t workers) {
  Config config;
  config.worker_threads = workers;
  config.max_worker_threads = 8;
  config.stall_threshold = milliseconds(0);
  config.shutdown_grace = milliseconds(5000);
  return config;
}

// Units spawned from outside threads and fanned out from workers: every
// one runs exactly once.
TEST(SchedulerStressTest, MillionsOfUnitsRunExactlyOnce) {
  Runtime rt(StressConfig(3));
  ASSERT_TRUE(rt.Start().ok());
  const int kOutside = 1'000'000 / kScale;  // From two outside threads.
  const int kFanOut = 1'000'000 / kScale;   // From units on the workers.
  std::vector<std::atomic<std::uint8_t>> ran(kOutside + kFanOut);
  std::vector<std::thread> spawners;
  for (int s = 0; s < 2; ++s) {
    spawners.emplace_back([&, s] {
      for (int i = s; i < kOutside; i += 2) {
        ASSERT_TRUE(rt.Spawn([&ran, i] { ran[i].fetch_add(1); }).ok());
      }
    });
  }
  constexpr int kRoots = 100;
  for (int r = 0; r < kRoots; ++r) {
    ASSERT_TRUE(rt.Spawn([&, r] {
                    const int per_root = kFanOut / kRoots;
                    for (int k = 0; k < per_root; ++k) {
                      const int i = kOutside + r * per_root + k;
                      (void)rt.Spawn([&ran, i] { ran[i].fetch_add(1); });
                    }
                  }).ok());
  }
  for (auto& s : spawners) s.join();
  ASSERT_TRUE(Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; },
                         std::chrono::seconds(120)));
  int wrong = 0;
  for (auto& r : ran) wrong += r.load() != 1;
  EXPECT_EQ(wrong, 0);
  rt.Shutdown();
}

// Many tasks, each woken by several threads at once and by each other:
// no task is ever polled concurrently, and a final wake is never lost.
TEST(SchedulerStressTest, WakeStormLosesNoWakeup) {
  Runtime rt(StressConfig(2));
  ASSERT_TRUE(rt.Start().ok());
  constexpr int kTasks = 64;
  struct Probe {
    std::atomic<bool> inside{false};
    std::atomic<int> polls{0};
  };
  std::vector<Probe> probes(kTasks);
  std::atomic<int> overlaps{0};
  std::vector<LambdaTask*> tasks;
  for (int i = 0; i < kTasks; ++i) {
    tasks.push_back(new LambdaTask(
        [&, i](LambdaTask*) {
          Probe& p = probes[i];
          if (p.inside.exchange(true)) overlaps.fetch_add(1);
          p.polls.fetch_add(1);
          // Wake a neighbour from inside a run: the LIFO path.
          if (p.polls.load() % 7 == 0) tasks[(i + 1) % kTasks]->Wake();
          p.inside.store(false);
          return false;
        },
        /*scheduled=*/false));
    tasks.back()->set_executor(rt.executor());
  }
  std::vector<std::thread> wakers;
  const int kWakes = 20000 / kScale;
  for (int w = 0; w < 4; ++w) {
    wakers.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (int k = 0; k < kWakes; ++k) tasks[rng() % kTasks]->Wake();
    });
  }
  for (auto& w : wakers) w.join();
  auto settled = [&] {
    for (auto* t : tasks) {
      if (t->state().Load() & (task::State::kScheduled | task::State::kRunning)) {
        return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(Eventually(settled, std::chrono::seconds(60)));
  std::vector<int> before(kTasks);
  for (int i = 0; i < kTasks; ++i) before[i] = probes[i].polls.load();
  for (auto* t : tasks) t->Wake();
  EXPECT_TRUE(Eventually([&] {
    for (int i = 0; i < kTasks; ++i) {
      if (probes[i].polls.load() <= before[i]) return false;
    }
    return true;
  }));
  EXPECT_EQ(overlaps.load(), 0);
  ASSERT_TRUE(Eventually(settled, std::chrono::seconds(60)));
  rt.Shutdown();
  for (auto* t : tasks) t->Unref();
}

// Workers come and go while units flow: none lost, none run twice.
TEST(SchedulerStressTest, ResizeStormLosesNothing) {
  Runtime rt(StressConfig(2));
  ASSERT_TRUE(rt.Start().ok());
  const int kUnits = 300'000 / kScale;
  std::vector<std::atomic<std::uint8_t>> ran(kUnits);
  std::atomic<bool> stop{false};
  std::thread resizer([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      ASSERT_TRUE(rt.ResizeWorkers(1 + rng() % 8).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> spawners;
  for (int s = 0; s < 2; ++s) {
    spawners.emplace_back([&, s] {
      for (int i = s; i < kUnits; i += 2) {
        // Half of them re-spawn from a worker: local queues get handed back.
        if (i % 2 == 0) {
          ASSERT_TRUE(rt.Spawn([&ran, i] { ran[i].fetch_add(1); }).ok());
        } else {
          ASSERT_TRUE(rt.Spawn([&rt, &ran, i] {
                          (void)rt.Spawn([&ran, i] { ran[i].fetch_add(1); });
                        }).ok());
        }
      }
    });
  }
  for (auto& s : spawners) s.join();
  ASSERT_TRUE(Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; },
                         std::chrono::seconds(120)));
  stop.store(true);
  resizer.join();
  int wrong = 0;
  for (auto& r : ran) wrong += r.load() != 1;
  EXPECT_EQ(wrong, 0);
  rt.Shutdown();
}

// Shutdown while units keep spawning units: every accepted unit either ran
// or took its cancel path, exactly once, and nothing leaks (ASan checks).
TEST(SchedulerStressTest, ShutdownUnderLoadAccountsForEveryUnit) {
  for (int round = 0; round < 20 / (kScale > 1 ? 4 : 1); ++round) {
    std::atomic<long> accepted{0}, ran{0}, cancelled{0};
    auto rt = std::make_unique<Runtime>(StressConfig(2));
    ASSERT_TRUE(rt->Start().ok());
    // A self-perpetuating unit: each run spawns the next.
    struct Chain {
      static void Spawn(Runtime* rt, std::atomic<long>* accepted,
                        std::atomic<long>* ran, std::atomic<long>* cancelled) {
        auto* t = new LambdaTask(
            [=](LambdaTask*) {
              ran->fetch_add(1);
              Spawn(rt, accepted, ran, cancelled);
              return true;
            },
            true, [=] { cancelled->fetch_add(1); });
        accepted->fetch_add(1);
        if (!rt->Spawn(t).ok()) {
          // Refused: its cancel path already ran.
        }
      }
    };
    for (int i = 0; i < 8; ++i) Chain::Spawn(rt.get(), &accepted, &ran, &cancelled);
    std::atomic<bool> stop{false};
    std::thread outside([&] {
      while (!stop.load()) {
        auto* t = new LambdaTask(
            [&](LambdaTask*) {
              ran.fetch_add(1);
              return true;
            },
            true, [&] { cancelled.fetch_add(1); });
        accepted.fetch_add(1);
        (void)rt->Spawn(t);
      }
    });
    std::this_thread::sleep_for(milliseconds(20));
    rt->Shutdown(milliseconds(20));
    stop.store(true);
    outside.join();
    EXPECT_EQ(rt->state(), admin::RuntimeState::kStopped);
    EXPECT_EQ(ran.load() + cancelled.load(), accepted.load());
    EXPECT_GT(cancelled.load(), 0);
    rt.reset();
  }
}

}  // namespace
}  // namespace mt::runtime
