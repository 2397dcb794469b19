#include "runtime/runtime.h"

#include <utility>

namespace mt::runtime {

using admin::RuntimeState;

Runtime::Runtime(Config config, scheduler::WorkerHooks hooks)
    : config_(std::move(config)),
      pool_(ResolveWorkerThreads(config_), config_.thread_name_prefix,
            std::move(hooks)) {}

Runtime::~Runtime() { Shutdown(); }

absl::Status Runtime::Start() {
  RuntimeState expected = RuntimeState::kCreated;
  if (!state_.compare_exchange_strong(expected, RuntimeState::kRunning,
                                      std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError("runtime was already started");
  }
  started_at_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_release);
  return pool_.Start();
}

absl::Status Runtime::Spawn(scheduler::Unit unit) {
  return pool_.Spawn(std::move(unit));
}

void Runtime::Shutdown() {
  RuntimeState current = state_.load(std::memory_order_acquire);
  while (current == RuntimeState::kCreated || current == RuntimeState::kRunning) {
    if (state_.compare_exchange_weak(current, RuntimeState::kStopping,
                                     std::memory_order_acq_rel)) {
      break;
    }
  }
  pool_.Shutdown();
  // From a worker the pool only stops intake; the runtime is "stopped" once
  // an outside caller has joined the workers.
  if (!pool_.IsWorkerThread()) {
    state_.store(RuntimeState::kStopped, std::memory_order_release);
  }
}

admin::RuntimeSnapshot Runtime::Snapshot() const {
  admin::RuntimeSnapshot snap;
  snap.state = state();
  snap.config = config_;
  snap.worker_threads = pool_.size();
  snap.live_workers = pool_.live_workers();
  snap.injector_depth = pool_.queued();
  const auto started = started_at_.load(std::memory_order_acquire);
  if (started != 0) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    snap.uptime_seconds = std::chrono::duration<double>(
                              std::chrono::steady_clock::duration(now - started))
                              .count();
  }
  snap.workers.reserve(pool_.size());
  for (std::size_t i = 0; i < pool_.size(); ++i) {
    const scheduler::WorkerStats& s = pool_.stats(i);
    snap.workers.push_back({
        .index = i,
        .units_run = s.units_run.load(std::memory_order_relaxed),
        .parks = s.parks.load(std::memory_order_relaxed),
        .busy_ns = s.busy_ns.load(std::memory_order_relaxed),
    });
  }
  return snap;
}

}  // namespace mt::runtime
