#include "runtime/scheduler/worker_pool.h"

#include <pthread.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::runtime::scheduler {
namespace {

// Which pool the current thread belongs to, so Shutdown can refuse to join
// itself and IsWorkerThread is one load.
thread_local const WorkerPool* current_pool = nullptr;

void SetThreadName(const std::string& name) {
  // Linux limits thread names to 15 bytes plus the terminator.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

void RunHook(const std::function<void(std::size_t)>& hook, std::size_t i) {
  if (hook) hook(i);
}

}  // namespace

WorkerPool::WorkerPool(std::size_t workers, std::string thread_name_prefix,
                       WorkerHooks hooks)
    : thread_name_prefix_(std::move(thread_name_prefix)),
      hooks_(std::move(hooks)) {
  stats_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) {
    stats_.push_back(std::make_unique<WorkerStats>());
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

absl::Status WorkerPool::Start() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (started_) return absl::FailedPreconditionError("pool already started");
  if (shut_down_) return absl::FailedPreconditionError("pool is shut down");
  if (stats_.empty()) {
    return absl::InvalidArgumentError("a pool needs at least one worker");
  }
  started_ = true;
  threads_.reserve(stats_.size());
  for (std::size_t i = 0; i < stats_.size(); ++i) {
    threads_.emplace_back([this, i] { WorkerMain(i); });
  }
  return absl::OkStatus();
}

absl::Status WorkerPool::Spawn(Unit unit) {
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (!started_) return absl::FailedPreconditionError("pool not started");
  }
  if (!injector_.Push(unit)) {
    return absl::FailedPreconditionError("pool is shutting down");
  }
  return absl::OkStatus();
}

void WorkerPool::Shutdown() {
  // A worker cannot join itself: from a worker, stop intake only. The
  // threads are joined by the next Shutdown from outside (at the latest the
  // destructor), after they have drained the queue.
  injector_.Close();
  if (IsWorkerThread()) return;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

bool WorkerPool::IsWorkerThread() const { return current_pool == this; }

void WorkerPool::WorkerMain(std::size_t index) {
  current_pool = this;
  SetThreadName(absl::StrCat(thread_name_prefix_, "-", index));
  WorkerStats& stats = *stats_[index];
  RunHook(hooks_.on_start, index);
  live_workers_.fetch_add(1, std::memory_order_acq_rel);

  auto before_wait = [&] {
    stats.parks.fetch_add(1, std::memory_order_relaxed);
    RunHook(hooks_.before_park, index);
  };
  auto after_wait = [&] { RunHook(hooks_.after_unpark, index); };

  while (std::optional<Unit> unit = injector_.PopOrWait(before_wait,
                                                        after_wait)) {
    const auto begin = std::chrono::steady_clock::now();
    std::move (*unit)();
    const auto spent = std::chrono::steady_clock::now() - begin;
    stats.busy_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
        std::memory_order_relaxed);
    stats.units_run.fetch_add(1, std::memory_order_relaxed);
  }

  live_workers_.fetch_sub(1, std::memory_order_acq_rel);
  RunHook(hooks_.on_stop, index);
  current_pool = nullptr;
}

}  // namespace mt::runtime::scheduler
