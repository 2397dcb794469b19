#ifndef MT_RUNTIME_CONFIG_H_
#define MT_RUNTIME_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace mt::runtime {

// Who drives the epoll reactor and the timers.
enum class ReactorMode {
  // Idle workers take turns: the first to park sleeps in epoll_wait, busy
  // workers poll it every `event_interval` ticks. No extra thread, no extra
  // hop between an event and the worker that runs its task.
  kWorkers,
  // One dedicated thread sleeps in epoll_wait and hands every wakeup to the
  // workers through the injector.
  kDedicatedThread,
};

std::string_view ReactorModeName(ReactorMode mode);

// What a Runtime is built with. Defaults follow mt-asyncio 0.3.0a1's
// `mt_asyncio.runtime()` so the Python layer can pass values straight down.
struct Config {
  // Worker threads that run units; 0 means "hardware threads + 4".
  std::size_t worker_threads = 0;
  // Upper bound for live resizing of the worker pool.
  std::size_t max_worker_threads = 256;
  // Upper bound of the blocking pool (threads spawned on demand).
  std::size_t blocking_threads_max = 128;
  // How long an idle blocking thread waits for work before it retires.
  std::chrono::milliseconds blocking_idle_ttl{30'000};
  // Prefix of each worker thread's OS name ("mt-worker-3").
  std::string thread_name_prefix = "mt-worker";
  // See ReactorMode; the default is chosen by the reactor round-trip
  // benchmark (docs/benchmarks.md).
  ReactorMode reactor = ReactorMode::kWorkers;
  // A unit holding a worker longer than this is reported as a stall
  // (0 disables the detector). asyncio's slow_callback_duration is 100 ms.
  std::chrono::milliseconds stall_threshold{100};
  // When every worker has been held by one unit this long, a stand-in
  // worker runs queued work of other domains (loops) until one returns
  // (Scheduler::StartStandIn); 0 never starts one.
  std::chrono::milliseconds stand_in_after{25};
  // Default grace period of a coordinated shutdown: how long in-flight
  // work may continue after servers stop accepting.
  std::chrono::milliseconds shutdown_grace{5'000};
  // One worker runs units in the order they were scheduled, as asyncio's
  // loop does (no LIFO slot); see SchedulerOptions::lone_worker_fifo.
  bool lone_worker_fifo = true;
};

// Resolves worker_threads == 0 to the default for this machine.
std::size_t ResolveWorkerThreads(const Config& config);

}  // namespace mt::runtime

#endif  // MT_RUNTIME_CONFIG_H_
