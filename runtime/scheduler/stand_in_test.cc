// The stand-in worker (stand_in.cc), through a whole Runtime: its
// supervisor is what starts one.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
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

Config OneWorker() {
  Config config;
  config.worker_threads = 1;
  config.max_worker_threads = 4;
  config.stall_threshold = milliseconds(0);
  config.stand_in_after = milliseconds(10);
  config.shutdown_grace = milliseconds(2000);
  return config;
}

// A unit of `domain` that runs `fn` once.
task::Task* UnitOf(std::uintptr_t domain, std::function<void()> fn) {
  auto* t = new LambdaTask([fn = std::move(fn)](LambdaTask*) {
    fn();
    return true;
  });
  t->set_domain(domain);
  return t;
}

// What ran, in order, from any thread.
class OrderLog {
 public:
  void Record(int what) {
    std::lock_guard<std::mutex> lock(mu_);
    order_.push_back(what);
  }
  std::vector<int> Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<int> order_;
};

// A unit of domain 1 that holds the only worker until `done` is true
// (bounded), as a step blocked on another loop's answer does; `before`
// runs first on the worker, `after` once it is released.
struct Held {
  std::atomic<bool> started{false}, done{false}, gave_up{false};

  void Spawn(Runtime& rt, std::function<void()> before = nullptr,
             std::function<void()> after = nullptr) {
    ASSERT_TRUE(
        rt.Spawn(UnitOf(1,
                        [this, before, after] {
                          if (before) before();
                          started.store(true);
                          if (!Eventually([this] { return done.load(); })) {
                            gave_up.store(true);
                          }
                          if (after) after();
                        }))
            .ok());
    ASSERT_TRUE(Eventually([this] { return started.load(); }));
  }
};

bool Drained(Runtime& rt) {
  return Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; });
}

// Stdlib gives the other loop a thread; here the stand-in runs its unit,
// queued from outside after the only worker was held.
TEST(StandInTest, RunsAnotherDomainsWorkWhileTheOnlyWorkerIsHeld) {
  Runtime rt(OneWorker());
  ASSERT_TRUE(rt.Start().ok());
  std::atomic<std::thread::id> worker_thread{}, answer_thread{};
  Held held;
  held.Spawn(rt, [&] { worker_thread.store(std::this_thread::get_id()); });
  ASSERT_TRUE(rt.Spawn(UnitOf(2,
                              [&] {
                                answer_thread.store(std::this_thread::get_id());
                                held.done.store(true);
                              }))
                  .ok());
  ASSERT_TRUE(Drained(rt));
  EXPECT_FALSE(held.gave_up.load());
  EXPECT_NE(answer_thread.load(), worker_thread.load());
  EXPECT_GE(rt.scheduler().stand_ins_started(), 1u);
  EXPECT_GE(rt.scheduler().stand_in_units_run(), 1u);
  // The stand-in leaves once the unit it stood in for has returned.
  EXPECT_TRUE(Eventually([&] { return !rt.scheduler().StandInRunning(); }));
  rt.Shutdown();
}

// Units of the held unit's domain wait for the worker, in their order,
// while the stand-in runs another domain's unit queued behind them: a loop
// whose step blocks still runs one unit at a time.
TEST(StandInTest, LeavesTheHeldDomainsUnitsAloneAndInOrder) {
  Runtime rt(OneWorker());
  ASSERT_TRUE(rt.Start().ok());
  OrderLog log;
  Held held;
  held.Spawn(rt, nullptr, [&] { log.Record(0); });
  ASSERT_TRUE(rt.Spawn(UnitOf(1, [&] { log.Record(1); })).ok());
  ASSERT_TRUE(rt.Spawn(UnitOf(1, [&] { log.Record(2); })).ok());
  ASSERT_TRUE(rt.Spawn(UnitOf(2,
                              [&] {
                                log.Record(10);
                                held.done.store(true);
                              }))
                  .ok());
  ASSERT_TRUE(Drained(rt));
  EXPECT_FALSE(held.gave_up.load());
  EXPECT_EQ(log.Get(), (std::vector<int>{10, 0, 1, 2}));
  rt.Shutdown();
}

// A lone worker queues its own wakes locally, and the unit that then holds
// it may be another domain's: the stand-in moves that queue to the
// injector's end, runs what is not of the held domain, and the freed
// worker then runs its own domain's units in their order, ahead of what
// was queued from outside later.
TEST(StandInTest, TakesOverTheHeldWorkersQueue) {
  Runtime rt(OneWorker());
  ASSERT_TRUE(rt.Start().ok());
  OrderLog log;
  Held held;
  held.Spawn(
      rt,
      [&] {  // Spawned from the worker: its own queue, in this order.
        ASSERT_TRUE(rt.Spawn(UnitOf(1, [&] { log.Record(1); })).ok());
        ASSERT_TRUE(rt.Spawn(UnitOf(2,
                                    [&] {
                                      log.Record(10);
                                      held.done.store(true);
                                    }))
                        .ok());
      },
      [&] {  // Then one of its own from outside, behind those.
        std::thread([&] {
          ASSERT_TRUE(rt.Spawn(UnitOf(1, [&] { log.Record(2); })).ok());
        }).join();
        std::this_thread::sleep_for(milliseconds(5));
        log.Record(0);
      });
  ASSERT_TRUE(Drained(rt));
  EXPECT_FALSE(held.gave_up.load());
  EXPECT_EQ(log.Get(), (std::vector<int>{10, 0, 1, 2}));
  rt.Shutdown();
}

// The stand-in drives the reactor the held worker cannot: a timer armed
// by the other domain's unit fires while the only worker stays held.
TEST(StandInTest, DrivesTimersWhileTheOnlyWorkerIsHeld) {
  Runtime rt(OneWorker());
  ASSERT_TRUE(rt.Start().ok());
  time::TimerEntry entry;
  std::atomic<int> step{0};
  Held held;
  auto* sleeper = new LambdaTask([&](LambdaTask* self) {
    if (step.fetch_add(1) == 0) {
      rt.driver().timers().Arm(
          &entry, std::chrono::steady_clock::now() + milliseconds(30), self);
      return false;
    }
    held.done.store(true);
    return true;
  });
  sleeper->set_domain(2);
  held.Spawn(rt);
  ASSERT_TRUE(rt.Spawn(sleeper).ok());
  ASSERT_TRUE(Drained(rt));
  EXPECT_FALSE(held.gave_up.load());
  EXPECT_EQ(step.load(), 2);
  rt.Shutdown();
}

// A unit that holds every worker with nothing else queued starts no
// stand-in, and none is started at all when stand_in_after is 0.
TEST(StandInTest, NoStandInWithoutWaitingWorkOrWhenDisabled) {
  for (const bool disabled : {false, true}) {
    Config config = OneWorker();
    if (disabled) config.stand_in_after = milliseconds(0);
    Runtime rt(config);
    ASSERT_TRUE(rt.Start().ok());
    Held held;
    held.Spawn(rt);
    std::this_thread::sleep_for(milliseconds(80));
    if (!disabled) EXPECT_EQ(rt.scheduler().stand_ins_started(), 0u);
    std::atomic<bool> ran{false};
    ASSERT_TRUE(rt.Spawn(UnitOf(2, [&] { ran.store(true); })).ok());
    std::this_thread::sleep_for(milliseconds(80));
    EXPECT_EQ(ran.load(), !disabled);
    EXPECT_EQ(rt.scheduler().stand_ins_started(), disabled ? 0u : 1u);
    held.done.store(true);
    ASSERT_TRUE(Drained(rt));
    EXPECT_TRUE(ran.load());
    rt.Shutdown();
  }
}

}  // namespace
}  // namespace mt::runtime
