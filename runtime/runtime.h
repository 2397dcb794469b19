#ifndef MT_RUNTIME_RUNTIME_H_
#define MT_RUNTIME_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "runtime/admin/admin_api.h"
#include "runtime/config.h"
#include "runtime/scheduler/unit.h"
#include "runtime/scheduler/worker_pool.h"

namespace mt::runtime {

// The process's runtime: configuration, the worker pool and the admin view
// of both. Start and Shutdown may be called from any thread; Shutdown is
// idempotent and runs every unit spawned before it.
class Runtime final : public admin::AdminApi {
 public:
  explicit Runtime(Config config, scheduler::WorkerHooks hooks = {});
  ~Runtime() override;

  absl::Status Start();
  absl::Status Spawn(scheduler::Unit unit);
  void Shutdown();

  admin::RuntimeState state() const {
    return state_.load(std::memory_order_acquire);
  }
  const Config& config() const { return config_; }
  bool IsWorkerThread() const { return pool_.IsWorkerThread(); }

  admin::RuntimeSnapshot Snapshot() const override;

 private:
  const Config config_;
  scheduler::WorkerPool pool_;
  std::atomic<admin::RuntimeState> state_{admin::RuntimeState::kCreated};
  std::atomic<std::chrono::steady_clock::rep> started_at_{0};
};

}  // namespace mt::runtime

#endif  // MT_RUNTIME_RUNTIME_H_
