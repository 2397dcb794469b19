// The scheduler through a real Runtime (it needs the reactor to park on).

#include "runtime/scheduler/scheduler.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/runtime.h"
#include "runtime/testing/notification.h"
#include "runtime/testing/test_tasks.h"

namespace mt::runtime {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;
using testing::LambdaTask;
using testing::Notification;

Config TestConfig(std::size_t workers,
                  ReactorMode reactor = ReactorMode::kWorkers) {
  Config config;
  config.worker_threads = workers;
  config.max_worker_threads = 16;
  config.reactor = reactor;
  config.stall_threshold = milliseconds(0);
  config.shutdown_grace = milliseconds(2000);
  return config;
}

void BusyFor(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

class SchedulerTest : public ::testing::TestWithParam<ReactorMode> {};

TEST_P(SchedulerTest, EverySpawnedUnitRunsOnce) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  constexpr int kUnits = 20000;
  std::vector<std::atomic<int>> ran(kUnits);
  for (int i = 0; i < kUnits; ++i) {
    ASSERT_TRUE(rt.Spawn([&ran, i] { ran[i].fetch_add(1); }).ok());
  }
  ASSERT_TRUE(
      Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; }));
  for (int i = 0; i < kUnits; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
  rt.Shutdown();
}

TEST_P(SchedulerTest, UnitsSpawnedFromWorkersRunAndAreStolen) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  constexpr int kChildren = 200;  // Fits the local ring: no overflow.
  std::atomic<int> done{0};
  std::atomic<int> spawner{-1};
  std::atomic<bool> spawner_saw_all{false};
  std::mutex mu;
  std::set<int> workers_used;
  // The parent queues its children on its own worker's ring and then stays
  // busy until they are done, so only stealing can run them. Timing does not
  // decide the outcome (a parent that returned early could run every child
  // itself on a loaded machine before the other worker woke up).
  auto child = [&] {
    BusyFor(std::chrono::microseconds(50));
    {
      std::lock_guard<std::mutex> lock(mu);
      workers_used.insert(rt.scheduler().CurrentWorkerIndex());
    }
    done.fetch_add(1);
  };
  auto parent = [&] {
    spawner.store(rt.scheduler().CurrentWorkerIndex());
    for (int i = 0; i < kChildren; ++i) (void)rt.Spawn(child);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (done.load() < kChildren &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    spawner_saw_all.store(done.load() == kChildren);
  };
  ASSERT_TRUE(rt.Spawn(parent).ok());
  // Longer than the parent's own deadline, so a failure never leaves it
  // running on this frame's locals.
  ASSERT_TRUE(Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; },
                         std::chrono::seconds(30)));
  EXPECT_EQ(done.load(), kChildren);
  EXPECT_TRUE(spawner_saw_all.load());
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(workers_used.size(), 1u);
    EXPECT_EQ(workers_used.count(spawner.load()), 0u);
  }
  const auto snap = rt.Snapshot();
  std::uint64_t steals = 0, stolen_from = 0;
  for (const auto& w : snap.workers) {
    steals += w.steals;
    stolen_from += w.stolen_from;
  }
  EXPECT_GT(steals, 0u);
  EXPECT_EQ(steals, stolen_from);
  rt.Shutdown();
}

TEST_P(SchedulerTest, HooksRunOnEveryWorkerAndParkHooksBalance) {
  std::atomic<int> starts{0}, stops{0}, parks{0}, unparks{0};
  scheduler::WorkerHooks hooks;
  hooks.on_start = [&](std::size_t) { starts.fetch_add(1); };
  hooks.on_stop = [&](std::size_t) { stops.fetch_add(1); };
  hooks.before_park = [&](std::size_t) { parks.fetch_add(1); };
  hooks.after_unpark = [&](std::size_t) { unparks.fetch_add(1); };
  {
    Runtime rt(TestConfig(3, GetParam()), hooks);
    ASSERT_TRUE(rt.Start().ok());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(rt.Spawn([] {}).ok());
    ASSERT_TRUE(
        Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; }));
    ASSERT_TRUE(Eventually([&] { return parks.load() >= 3; }));
    rt.Shutdown();
  }
  EXPECT_EQ(starts.load(), 3);
  EXPECT_EQ(stops.load(), 3);
  EXPECT_EQ(parks.load(), unparks.load());
}

// Parked workers run their park hooks once more without work to wake
// them for (the Python layer lets go of a closed loop there).
TEST_P(SchedulerTest, RerunParkHooksReachesEveryParkedWorker) {
  std::mutex mu;
  std::set<std::thread::id> reran;
  std::atomic<bool> armed{false};
  std::atomic<int> parks{0}, unparks{0};
  scheduler::WorkerHooks hooks;
  hooks.before_park = [&](std::size_t) {
    parks.fetch_add(1);
    if (!armed.load()) return;
    std::lock_guard<std::mutex> lock(mu);
    reran.insert(std::this_thread::get_id());
  };
  hooks.after_unpark = [&](std::size_t) { unparks.fetch_add(1); };
  Runtime rt(TestConfig(3, GetParam()), hooks);
  ASSERT_TRUE(rt.Start().ok());
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(rt.Spawn([] {}).ok());
  ASSERT_TRUE(
      Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; }));
  // All three asleep: every park so far has its unpark but the current one.
  ASSERT_TRUE(Eventually([&] { return parks.load() - unparks.load() == 3; }));
  armed.store(true);
  rt.scheduler().RerunParkHooks();
  EXPECT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return reran.size() == 3;
  }));
  EXPECT_EQ(parks.load() - unparks.load(), 3);  // Still balanced, still parked.
  rt.Shutdown();
}

// A task woken from many threads while it runs: never polled by two
// threads at once, and a wake after the storm still leads to a poll.
TEST_P(SchedulerTest, WakeStormNeverOverlapsAndLastWakeIsHonoured) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  std::atomic<bool> inside{false};
  std::atomic<int> overlaps{0}, polls{0};
  auto* t = new LambdaTask(
      [&](LambdaTask*) {
        if (inside.exchange(true)) overlaps.fetch_add(1);
        polls.fetch_add(1);
        inside.store(false);
        return false;
      },
      /*scheduled=*/true);
  t->Ref();  // Ours, for waking.
  ASSERT_TRUE(rt.Spawn(t).ok());
  std::vector<std::thread> wakers;
  for (int k = 0; k < 3; ++k) {
    wakers.emplace_back([t] {
      for (int i = 0; i < 20000; ++i) t->Wake();
    });
  }
  for (auto& w : wakers) w.join();
  ASSERT_TRUE(Eventually([&] {
    return (t->state().Load() &
            (task::State::kScheduled | task::State::kRunning)) == 0;
  }));
  const int before = polls.load();
  t->Wake();
  EXPECT_TRUE(Eventually([&] { return polls.load() > before; }));
  EXPECT_EQ(overlaps.load(), 0);
  t->Cancel();
  t->Unref();
  rt.Shutdown();
}

// Two tasks that wake each other forever would own the LIFO slot; the cap
// must still let a queued task run.
TEST_P(SchedulerTest, PingPongPairCannotStarveTheQueue) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  std::atomic<bool> stop{false};
  LambdaTask* a = nullptr;
  LambdaTask* b = nullptr;
  a = new LambdaTask(
      [&](LambdaTask*) {
        if (stop.load()) return true;
        b->Wake();
        return false;
      },
      /*scheduled=*/false);
  b = new LambdaTask(
      [&](LambdaTask*) {
        if (stop.load()) return true;
        a->Wake();
        return false;
      },
      /*scheduled=*/false);
  a->set_executor(rt.executor());
  b->set_executor(rt.executor());
  Notification starved_task_ran;
  ASSERT_TRUE(rt.Spawn([&] {
                  a->Wake();
                  // Spawned behind the pair on the same worker.
                  (void)rt.Spawn([&] { starved_task_ran.Notify(); });
                }).ok());
  EXPECT_TRUE(starved_task_ran.WaitFor(milliseconds(5000)));
  stop.store(true);
  a->Wake();
  b->Wake();
  ASSERT_TRUE(Eventually([&] {
    return (a->state().Load() & task::State::kComplete) &&
           (b->state().Load() & task::State::kComplete);
  }));
  a->Unref();
  b->Unref();
  rt.Shutdown();
}

// Idle units that record, in the order they run, the name each was made
// with; they are unreferenced with the recorder.
template <typename Name>
class RunOrder {
 public:
  explicit RunOrder(Runtime& rt) : rt_(rt) {}
  ~RunOrder() {
    for (LambdaTask* unit : units_) unit->Unref();
  }
  LambdaTask* Unit(Name name) {
    auto* unit = new LambdaTask(
        [this, name](LambdaTask*) {
          std::lock_guard<std::mutex> lock(mu_);
          order_.push_back(name);
          return true;
        },
        /*scheduled=*/false);
    unit->set_executor(rt_.executor());
    units_.push_back(unit);
    return unit;
  }
  // Waits (bounded) until every unit made has run; returns the order.
  std::vector<Name> AllRun() {
    EXPECT_TRUE(Eventually([&] {
      std::lock_guard<std::mutex> lock(mu_);
      return order_.size() == units_.size();
    }));
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  Runtime& rt_;
  std::vector<LambdaTask*> units_;
  std::mutex mu_;
  std::vector<Name> order_;
};

// One worker runs what it woke in the order it woke it, as asyncio's one
// thread runs its ready queue; with lone_worker_fifo off, the last wake
// takes the LIFO slot and runs first (the multi-worker rule).
TEST_P(SchedulerTest, LoneWorkerRunsWakesInOrder) {
  for (bool fifo : {true, false}) {
    Config config = TestConfig(1, GetParam());
    config.lone_worker_fifo = fifo;
    Runtime rt(config);
    ASSERT_TRUE(rt.Start().ok());
    {
      RunOrder<char> run(rt);
      std::vector<LambdaTask*> units = {run.Unit('x'), run.Unit('y'),
                                        run.Unit('z')};
      ASSERT_TRUE(rt.Spawn([&] {
                      for (LambdaTask* unit : units) unit->Wake();
                    }).ok());
      const std::vector<char> order = run.AllRun();
      EXPECT_EQ(std::string(order.begin(), order.end()), fifo ? "xyz" : "zxy")
          << "lone_worker_fifo=" << fifo;
    }
    rt.Shutdown();
  }
}

// A lone worker runs what another thread scheduled before what it queues
// itself after waiting for that thread: a unit that blocks until a thread
// has woken `remote` (anyio's worker thread: call_soon_threadsafe, then
// task_done) and then wakes `local` sees `remote` run first, as asyncio's
// one ready queue would order them.
TEST_P(SchedulerTest, LoneWorkerRunsRemoteWakesBeforeLaterLocalOnes) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  {
    RunOrder<char> run(rt);
    LambdaTask* remote = run.Unit('r');
    LambdaTask* local = run.Unit('l');
    ASSERT_TRUE(rt.Spawn([&] {
                    std::thread other([&] { remote->Wake(); });
                    other.join();
                    local->Wake();
                  }).ok());
    EXPECT_EQ(run.AllRun(), (std::vector<char>{'r', 'l'}));
  }
  rt.Shutdown();
}

// ... but a full injector does not starve what the lone worker queued:
// after global_queue_interval (31) units from the injector, a local one.
TEST_P(SchedulerTest, LoneWorkerDoesNotStarveItsQueueBehindTheInjector) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  constexpr int kRemote = 100;
  {
    RunOrder<int> run(rt);
    LambdaTask* local = run.Unit(-1);
    std::vector<LambdaTask*> remote;
    for (int i = 0; i < kRemote; ++i) remote.push_back(run.Unit(i));
    ASSERT_TRUE(rt.Spawn([&] {
                    std::thread other([&] {
                      for (LambdaTask* unit : remote) unit->Wake();
                    });
                    other.join();
                    local->Wake();
                  }).ok());
    const std::vector<int> order = run.AllRun();
    ASSERT_EQ(order.size(), kRemote + 1u);
    const auto at = std::find(order.begin(), order.end(), -1) - order.begin();
    // The spawned unit itself came from the injector too.
    EXPECT_GE(at, 1);
    EXPECT_LE(at, 31);
    for (int i = 0; i < kRemote; ++i) {
      EXPECT_EQ(order[i < at ? i : i + 1], i)
          << "remote units keep their order";
    }
  }
  rt.Shutdown();
}

TEST_P(SchedulerTest, TimerWakesTaskNotBeforeDeadline) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  time::TimerEntry entry;
  Notification fired;
  std::atomic<int> step{0};
  const auto armed_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point fired_at;
  auto* t = new LambdaTask([&](LambdaTask* self) {
    if (step.fetch_add(1) == 0) {
      rt.driver().timers().Arm(&entry, armed_at + milliseconds(30), self);
      return false;
    }
    fired_at = std::chrono::steady_clock::now();
    fired.Notify();
    return true;
  });
  ASSERT_TRUE(rt.Spawn(t).ok());
  ASSERT_TRUE(fired.WaitFor(milliseconds(5000)));
  EXPECT_GE(fired_at - armed_at, milliseconds(30));
  EXPECT_LT(fired_at - armed_at, milliseconds(2000));
  rt.Shutdown();
}

TEST_P(SchedulerTest, ReadinessWakesWaitingTask) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  io::ScheduledIo* io = *rt.driver().io().Register(fds[0]);
  Notification got;
  std::atomic<int> bytes{0};
  auto* t = new LambdaTask([&](LambdaTask* self) {
    while (true) {
      auto ready = rt.driver().io().PollReady(io, io::Direction::kRead, self);
      if (!ready) return false;  // Woken when readable.
      char buf[16];
      const ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n > 0) {
        bytes.fetch_add(static_cast<int>(n));
        if (bytes.load() >= 3) {
          got.Notify();
          return true;
        }
        continue;
      }
      rt.driver().io().ClearReadiness(io, io::Direction::kRead, *ready);
    }
  });
  ASSERT_TRUE(rt.Spawn(t).ok());
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(write(fds[1], "a", 1), 1);
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(write(fds[1], "bc", 2), 2);
  EXPECT_TRUE(got.WaitFor(milliseconds(5000)));
  ASSERT_TRUE(rt.driver().io().Deregister(io).ok());
  close(fds[0]);
  close(fds[1]);
  rt.Shutdown();
}

// add_reader-style callback on a live runtime: data keeps arriving while
// the callback runs (slowly); it must never run on two workers at once and
// must keep running until every byte is consumed.
TEST_P(SchedulerTest, LevelCallbackNeverOverlapsItselfAndDrainsTheFd) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  io::ScheduledIo* io = *rt.driver().io().Register(fds[0]);
  std::atomic<bool> inside{false};
  std::atomic<int> overlaps{0}, consumed{0};
  constexpr int kBytes = 40;
  rt.driver().io().SetCallback(io, io::Direction::kRead, rt.executor(), [&] {
    if (inside.exchange(true)) overlaps.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    char c;
    if (read(fds[0], &c, 1) == 1) consumed.fetch_add(1);  // One per run.
    inside.store(false);
  });
  for (int i = 0; i < kBytes; ++i) {
    ASSERT_EQ(write(fds[1], "x", 1), 1);
    if (i % 8 == 0) std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_TRUE(Eventually([&] { return consumed.load() == kBytes; }));
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_TRUE(rt.driver().io().ClearCallback(io, io::Direction::kRead));
  ASSERT_TRUE(rt.driver().io().Deregister(io).ok());
  close(fds[0]);
  close(fds[1]);
  rt.Shutdown();
}

TEST_P(SchedulerTest, ResizeUpAndDownLosesNothing) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  ASSERT_TRUE(rt.ResizeWorkers(4).ok());
  EXPECT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 4; }));
  constexpr int kUnits = 5000;
  std::vector<std::atomic<int>> ran(kUnits);
  for (int i = 0; i < kUnits; ++i) {
    ASSERT_TRUE(rt.Spawn([&ran, i] { ran[i].fetch_add(1); }).ok());
    if (i == kUnits / 2) ASSERT_TRUE(rt.ResizeWorkers(1).ok());
  }
  ASSERT_TRUE(
      Eventually([&] { return rt.scheduler().tasks_in_flight() == 0; }));
  for (int i = 0; i < kUnits; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
  EXPECT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 1; }));
  EXPECT_EQ(rt.Snapshot().worker_threads, 1u);
  EXPECT_EQ(rt.ResizeWorkers(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt.ResizeWorkers(17).code(), absl::StatusCode::kInvalidArgument);
  rt.Shutdown();
}

// A resize down leaves the retired workers' threads dormant and a resize
// up wakes them: the same OS threads serve every round, work queued while
// they sleep runs, and shutdown joins them.
TEST_P(SchedulerTest, ResizeRoundsReuseDormantThreads) {
  Runtime rt(TestConfig(4, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  auto tids = [&] {
    std::set<std::int32_t> ids;
    for (std::size_t i = 0; i < rt.scheduler().slot_count(); ++i) {
      ids.insert(rt.scheduler().WorkerMetrics(i)->os_thread_id.load());
    }
    return ids;
  };
  ASSERT_TRUE(
      Eventually([&] { return tids().count(0) == 0 && tids().size() == 4; }));
  const std::set<std::int32_t> first = tids();
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(rt.ResizeWorkers(1).ok());
    ASSERT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 1; }))
        << "round " << round << " live " << rt.scheduler().live_workers();
    std::atomic<int> ran{0};
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE(rt.Spawn([&ran] { ran.fetch_add(1); }).ok());
    ASSERT_TRUE(rt.ResizeWorkers(4).ok());
    ASSERT_TRUE(Eventually([&] { return ran.load() == 100; }));
    ASSERT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 4; }));
  }
  EXPECT_EQ(tids(), first);
  EXPECT_EQ(rt.scheduler().slot_count(), 4u);
  ASSERT_TRUE(rt.ResizeWorkers(2).ok());
  ASSERT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 2; }));
  rt.Shutdown();  // Joins the two dormant threads too.
  EXPECT_EQ(rt.scheduler().live_workers(), 0u);
}

// The worker sleeping in the reactor may be the one a resize retires: the
// reactor must be taken over, or timers would never fire again.
TEST_P(SchedulerTest, TimersKeepFiringAfterTheReactorDriverRetires) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  for (int round = 0; round < 5; ++round) {
    // Keep worker 0 busy while worker 1 starts: worker 1 parks first and
    // takes the reactor; worker 0 then parks on its condition variable.
    Notification busy, release;
    ASSERT_TRUE(rt.Spawn([&] {
                    busy.Notify();
                    release.WaitFor(milliseconds(5000));
                  }).ok());
    ASSERT_TRUE(busy.WaitFor(milliseconds(5000)));
    ASSERT_TRUE(rt.ResizeWorkers(2).ok());
    ASSERT_TRUE(Eventually([&] { return rt.Snapshot().parked_workers == 1; }));
    release.Notify();
    ASSERT_TRUE(Eventually([&] { return rt.Snapshot().parked_workers == 2; }));
    ASSERT_TRUE(rt.ResizeWorkers(1).ok());  // Retires worker 1.
    ASSERT_TRUE(Eventually([&] { return rt.scheduler().live_workers() == 1; }));
    time::TimerEntry entry;
    Notification fired;
    auto* t = new LambdaTask(
        [&](LambdaTask*) {
          fired.Notify();
          return true;
        },
        /*scheduled=*/false);
    t->set_executor(rt.executor());
    rt.driver().timers().Arm(
        &entry, std::chrono::steady_clock::now() + milliseconds(5), t);
    t->Unref();  // The timer holds it.
    ASSERT_TRUE(fired.WaitFor(milliseconds(3000))) << "round " << round;
  }
  rt.Shutdown();
}

TEST_P(SchedulerTest, SpawnAfterShutdownIsRefusedAndDropsTheUnit) {
  Runtime rt(TestConfig(1, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  rt.Shutdown();
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> weak = token;
  bool ran = false;
  EXPECT_EQ(rt.Spawn([&ran, token = std::move(token)] { ran = true; }).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(weak.expired());
}

TEST_P(SchedulerTest, IdleWorkersPark) {
  Runtime rt(TestConfig(2, GetParam()));
  ASSERT_TRUE(rt.Start().ok());
  ASSERT_TRUE(Eventually([&] { return rt.Snapshot().parked_workers == 2; }));
  Notification ran;
  ASSERT_TRUE(rt.Spawn([&] { ran.Notify(); }).ok());
  EXPECT_TRUE(ran.WaitFor(milliseconds(5000)));
  rt.Shutdown();
}

INSTANTIATE_TEST_SUITE_P(ReactorModes, SchedulerTest,
                         ::testing::Values(ReactorMode::kWorkers,
                                           ReactorMode::kDedicatedThread),
                         [](const ::testing::TestParamInfo<ReactorMode>& info) {
                           return info.param == ReactorMode::kWorkers
                                      ? std::string("WorkersDrive")
                                      : std::string("DedicatedThread");
                         });

}  // namespace
}  // namespace mt::runtime
