// Microbenchmarks of the runtime core: `bazel run -c opt //runtime:bench`.
// Results and how to read them: docs/benchmarks.md.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/metrics/cycle_clock.h"
#include "runtime/metrics/histogram.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/injector.h"
#include "runtime/scheduler/local_queue.h"
#include "runtime/task/task.h"
#include "runtime/time/timer_driver.h"

namespace mt::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Queues only move pointers: these never run.
class Inert final : public task::Task {
 public:
  Inert() : Task(true) {}
  bool Poll() override { return false; }
};

// The bench thread blocks (never spins) while the runtime works: on a
// 2-core machine a spinning waiter would take a core from the workers.
class Latch {
 public:
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = false;
  }
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_one();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return done_; })) {
      std::abort();  // A hang is a bug.
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// Counts down; the unit that reaches zero opens the latch.
struct Countdown {
  explicit Countdown(int n) : left(n) {}
  void Hit() {
    if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) latch.Set();
  }
  std::atomic<int> left;
  Latch latch;
};

// A task that re-parks after every poll and records when it ran.
class Pinger final : public task::Task {
 public:
  Pinger() : Task(false) {}
  bool Poll() override {
    polled_at.store(Clock::now().time_since_epoch().count(),
                    std::memory_order_release);
    polls.fetch_add(1, std::memory_order_release);
    latch.Set();
    return false;
  }
  std::atomic<Clock::rep> polled_at{0};
  std::atomic<std::uint64_t> polls{0};
  Latch latch;
};

class NullExecutor final : public task::Executor {
 public:
  // Runs the unit at once: for timer expiry, the cost measured is the
  // wheel plus the wake, not a queue.
  void Schedule(task::Task* task, task::ScheduleKind) override {
    task::RunTask(task);
  }
};


// CPU time of the whole process (every thread), in microseconds: shows
// what a design costs beyond the latency the bench thread sees.
double ProcessCpuUs() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

Config BenchConfig(std::size_t workers, ReactorMode mode = ReactorMode::kWorkers) {
  Config config;
  config.worker_threads = workers;
  config.reactor = mode;
  config.stall_threshold = std::chrono::milliseconds(0);
  return config;
}

// --- queues -----------------------------------------------------------------

void BM_LocalQueuePushPop(benchmark::State& state) {
  scheduler::LocalQueue q;
  Inert t;
  for (auto _ : state) {
    q.TryPush(&t);
    benchmark::DoNotOptimize(q.Pop());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LocalQueuePushPop);

void BM_InjectorPushPop(benchmark::State& state) {
  scheduler::Injector injector;
  Inert t;
  for (auto _ : state) {
    injector.Push(&t);
    benchmark::DoNotOptimize(injector.Pop());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InjectorPushPop);

// Fill a victim with 128 units, steal half into an empty queue, drain both.
// Items are stolen units; the time includes refilling.
void BM_Steal(benchmark::State& state) {
  scheduler::LocalQueue victim, thief;
  std::vector<Inert> tasks(128);
  std::uint64_t stolen_total = 0;
  for (auto _ : state) {
    for (auto& t : tasks) victim.TryPush(&t);
    std::uint32_t stolen = 0;
    benchmark::DoNotOptimize(victim.StealInto(thief, stolen));
    stolen_total += stolen;
    while (thief.Pop() != nullptr) {
    }
    while (victim.Pop() != nullptr) {
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(stolen_total));
}
BENCHMARK(BM_Steal);

// --- spawn and run ------------------------------------------------------------

// A unit on a worker spawns a batch of empty units; the time is until the
// last one ran. This is the path tasks spawned by tasks take. Args: workers,
// batch. 10k (Tokio's spawn_many size) fits the L2 cache; 100k shows what a
// burst costs once every task is a cache miss.
void BM_SpawnAndRun(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  Runtime rt(BenchConfig(workers));
  if (!rt.Start().ok()) return state.SkipWithError("runtime failed to start");
  // Each worker counts the units it ran in its own cache line: a shared
  // countdown would measure cache-line ping-pong between the workers, not
  // the scheduler. The bench thread polls the sum, sleeping in between.
  struct alignas(64) Counter {
    std::atomic<std::int64_t> n{0};
  };
  std::vector<Counter> ran(workers);
  std::int64_t expected = 0;
  for (auto _ : state) {
    expected += batch;
    (void)rt.Spawn([&] {
      for (int i = 0; i < batch; ++i) {
        (void)rt.Spawn([&] {
          auto& c = ran[static_cast<std::size_t>(rt.scheduler().CurrentWorkerIndex())].n;
          c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        });
      }
    });
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (true) {
      std::int64_t sum = 0;
      for (auto& c : ran) sum += c.n.load(std::memory_order_acquire);
      if (sum == expected) break;
      if (Clock::now() > deadline) std::abort();  // A hang is a bug.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  rt.Shutdown();
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_SpawnAndRun)
    ->Args({1, 10'000})
    ->Args({2, 10'000})
    ->Args({1, 100'000})
    ->Args({2, 100'000})
    ->UseRealTime();

// The same from a thread outside the runtime: every unit goes through the
// injector.
void BM_SpawnAndRunExternal(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  constexpr int kBatch = 100'000;
  Runtime rt(BenchConfig(workers));
  if (!rt.Start().ok()) return state.SkipWithError("runtime failed to start");
  for (auto _ : state) {
    Countdown done(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      (void)rt.Spawn([&done] { done.Hit(); });
    }
    done.latch.Wait();
  }
  rt.Shutdown();
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_SpawnAndRunExternal)->Arg(1)->Arg(2)->UseRealTime();

// Units of about 1 us of work, spawned by 8 root units: scaling 1 -> 2
// workers is the ratio of items/s.
void BM_SpawnAndRun1us(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  constexpr int kRoots = 8;
  constexpr int kPerRoot = 5'000;
  Runtime rt(BenchConfig(workers));
  if (!rt.Start().ok()) return state.SkipWithError("runtime failed to start");
  for (auto _ : state) {
    Countdown done(kRoots * kPerRoot);
    for (int r = 0; r < kRoots; ++r) {
      (void)rt.Spawn([&] {
        for (int i = 0; i < kPerRoot; ++i) {
          (void)rt.Spawn([&done] {
            const auto end = Clock::now() + std::chrono::microseconds(1);
            while (Clock::now() < end) {
            }
            done.Hit();
          });
        }
      });
    }
    done.latch.Wait();
  }
  rt.Shutdown();
  state.SetItemsProcessed(state.iterations() * kRoots * kPerRoot);
}
BENCHMARK(BM_SpawnAndRun1us)->Arg(1)->Arg(2)->UseRealTime();

// --- wake latency -------------------------------------------------------------

// An outside thread wakes a parked task and waits until it ran: reports the
// wake-to-poll latency percentiles (p50_us, p99_us) as counters.
void WakeLatency(benchmark::State& state, ReactorMode mode) {
  Runtime rt(BenchConfig(2, mode));
  if (!rt.Start().ok()) return state.SkipWithError("runtime failed to start");
  auto* pinger = new Pinger();
  pinger->set_executor(rt.executor());
  std::vector<double> latencies_us;
  latencies_us.reserve(100'000);
  for (auto _ : state) {
    // Let the workers park so each wake is a real cross-thread wakeup.
    state.PauseTiming();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    pinger->latch.Reset();
    state.ResumeTiming();
    const Clock::time_point woke = Clock::now();
    pinger->Wake();
    pinger->latch.Wait();
    const Clock::time_point ran{Clock::duration(pinger->polled_at.load())};
    latencies_us.push_back(
        std::chrono::duration<double, std::micro>(ran - woke).count());
  }
  rt.Shutdown();
  pinger->Unref();
  std::sort(latencies_us.begin(), latencies_us.end());
  if (!latencies_us.empty()) {
    state.counters["p50_us"] = latencies_us[latencies_us.size() / 2];
    state.counters["p99_us"] = latencies_us[latencies_us.size() * 99 / 100];
  }
}
void BM_CrossThreadWake_WorkersDrive(benchmark::State& state) {
  WakeLatency(state, ReactorMode::kWorkers);
}
void BM_CrossThreadWake_DedicatedReactor(benchmark::State& state) {
  WakeLatency(state, ReactorMode::kDedicatedThread);
}
BENCHMARK(BM_CrossThreadWake_WorkersDrive)->Iterations(2000)->UseRealTime();
BENCHMARK(BM_CrossThreadWake_DedicatedReactor)->Iterations(2000)->UseRealTime();

// --- timers -------------------------------------------------------------------

// What the task step histograms add to every step: RecordTaskStep with
// its two cycles-to-ns conversions, and the time-stamp read at the wake
// that queued the task.
void BM_StepHistogramsPerStep(benchmark::State& state) {
  metrics::CycleClock::Anchor();
  std::uint64_t cycles = 1000;
  for (auto _ : state) {
    const std::uint64_t queued = metrics::CycleClock::Now();
    benchmark::DoNotOptimize(queued);
    metrics::RecordTaskStep(metrics::CycleClock::ToNsFast(cycles),
                            metrics::CycleClock::ToNsFast(cycles * 3));
    cycles = cycles * 1103515245 % 100'000'000 + 1;  // Spread over the buckets.
  }
}
BENCHMARK(BM_StepHistogramsPerStep);

void BM_TimerInsertCancel(benchmark::State& state) {
  time::TimerDriver timers([] {});
  NullExecutor executor;
  Pinger task;
  task.set_executor(&executor);
  time::TimerEntry entry;
  const Clock::time_point base = Clock::now() + std::chrono::seconds(1);
  std::int64_t i = 0;
  for (auto _ : state) {
    timers.Arm(&entry, base + std::chrono::microseconds(i++ % 100'000), &task);
    benchmark::DoNotOptimize(timers.Cancel(&entry));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TimerInsertCancel);

// Arm 10k timers over the next 100 ms, then expire them all at once: the
// per-timer cost of insert + cascade + fire + wake.
void BM_TimerExpire(benchmark::State& state) {
  constexpr int kTimers = 10'000;
  NullExecutor executor;
  std::vector<std::unique_ptr<Pinger>> tasks;
  for (int i = 0; i < kTimers; ++i) {
    tasks.push_back(std::make_unique<Pinger>());
    tasks.back()->set_executor(&executor);
    tasks.back()->Ref();  // Never freed by the wakes.
  }
  std::vector<time::TimerEntry> entries(kTimers);
  for (auto _ : state) {
    time::TimerDriver timers([] {});
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < kTimers; ++i) {
      timers.Arm(&entries[i], now + std::chrono::microseconds(10 * (i + 1)),
                 tasks[i].get());
    }
    benchmark::DoNotOptimize(
        timers.ProcessExpired(now + std::chrono::milliseconds(200)));
  }
  state.SetItemsProcessed(state.iterations() * kTimers);
}
BENCHMARK(BM_TimerExpire);

// --- reactor --------------------------------------------------------------------

// Round trips through the reactor: the bench thread writes a byte into each
// of N sockets; a task per socket, woken by readability, reads it and writes
// it back; the bench thread then reads every echo (blocking). N = 1 is the
// latency of one wakeup; N = 64 is a burst of events per reactor turn.
// Both ways of driving the reactor, with the process's CPU per round trip.
class Echo final : public task::Task {
 public:
  Echo(Runtime* rt, io::ScheduledIo* io, int fd)
      : Task(true), rt_(rt), io_(io), fd_(fd) {}
  bool Poll() override {
    while (true) {
      auto ready = rt_->driver().io().PollReady(io_, io::Direction::kRead, this);
      if (!ready) return false;
      char buf[64];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n > 0) {
        (void)!write(fd_, buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return true;  // Peer closed: done.
      rt_->driver().io().ClearReadiness(io_, io::Direction::kRead, *ready);
    }
  }

 private:
  Runtime* rt_;
  io::ScheduledIo* io_;
  int fd_;
};

void ReactorRoundTrip(benchmark::State& state, ReactorMode mode) {
  const int connections = static_cast<int>(state.range(0));
  Runtime rt(BenchConfig(2, mode));
  if (!rt.Start().ok()) return state.SkipWithError("runtime failed to start");
  struct Conn {
    int ours = -1;    // Blocking, the bench thread's end.
    int theirs = -1;  // Non-blocking, the runtime's end.
    io::ScheduledIo* io = nullptr;
  };
  std::vector<Conn> conns(connections);
  for (Conn& c : conns) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
      return state.SkipWithError("socketpair failed");
    }
    c.theirs = fds[0];
    c.ours = fds[1];
    fcntl(c.theirs, F_SETFL, fcntl(c.theirs, F_GETFL) | O_NONBLOCK);
    c.io = *rt.driver().io().Register(c.theirs);
    (void)rt.Spawn(new Echo(&rt, c.io, c.theirs));
  }
  char byte = 'x';
  const double cpu_before = ProcessCpuUs();
  for (auto _ : state) {
    for (Conn& c : conns) {
      if (write(c.ours, &byte, 1) != 1) state.SkipWithError("write failed");
    }
    for (Conn& c : conns) {
      if (read(c.ours, &byte, 1) != 1) state.SkipWithError("read failed");
    }
  }
  const double round_trips = static_cast<double>(state.iterations()) * connections;
  state.counters["process_cpu_us"] = (ProcessCpuUs() - cpu_before) / round_trips;
  for (Conn& c : conns) close(c.ours);  // Each echo task sees EOF and ends.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  rt.Shutdown();
  for (Conn& c : conns) {
    (void)rt.driver().io().Deregister(c.io);
    close(c.theirs);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(round_trips));
}
void BM_ReactorRoundTrip_WorkersDrive(benchmark::State& state) {
  ReactorRoundTrip(state, ReactorMode::kWorkers);
}
void BM_ReactorRoundTrip_DedicatedReactor(benchmark::State& state) {
  ReactorRoundTrip(state, ReactorMode::kDedicatedThread);
}
BENCHMARK(BM_ReactorRoundTrip_WorkersDrive)->Arg(1)->Arg(64)->UseRealTime();
BENCHMARK(BM_ReactorRoundTrip_DedicatedReactor)->Arg(1)->Arg(64)->UseRealTime();

}  // namespace
}  // namespace mt::runtime

BENCHMARK_MAIN();
