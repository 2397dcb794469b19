#ifndef MT_RUNTIME_RUNTIME_H_
#define MT_RUNTIME_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "runtime/admin/admin_api.h"
#include "runtime/blocking/pool.h"
#include "runtime/config.h"
#include "runtime/driver.h"
#include "runtime/scheduler/hooks.h"
#include "runtime/scheduler/park.h"
#include "runtime/scheduler/scheduler.h"
#include "runtime/task/task.h"

namespace mt::runtime {

// The process's runtime: the scheduler and its workers, the reactor and
// timers, the blocking pool, coordinated shutdown, the stall detector and
// the admin view of all of it.
//
// A supervisor thread (mt-supervisor) runs shutdowns requested from workers
// or signal handlers and scans for stalled workers.
class Runtime final : public admin::AdminApi {
 public:
  explicit Runtime(Config config, scheduler::WorkerHooks hooks = {});
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  absl::Status Start();

  // Queues a closure; FailedPrecondition once shutdown reached the
  // cancelling phase (the closure is then dropped unrun).
  absl::Status Spawn(absl::AnyInvocable<void() &&> fn);
  // Queues a task created in the kScheduled state.
  absl::Status Spawn(task::Task* task);
  task::Executor* executor() { return &scheduler_; }
  Driver& driver() { return *driver_; }
  blocking::BlockingPool& blocking_pool() { return *blocking_; }

  // Coordinated shutdown hooks, run in order on the thread running the
  // shutdown: drain hooks when it begins (stop accepting), cancel hooks
  // when the grace period is over (cancel what is left). Register before
  // shutdown starts.
  void AddDrainHook(std::function<void()> hook);
  void AddCancelHook(std::function<void()> hook);
  // Receives each stall the detector finds (default: a line on stderr).
  void SetStallHandler(std::function<void(const admin::StallReport&)> handler);

  // Runs the whole shutdown with the configured grace and returns when the
  // runtime is stopped. From a worker it only requests it (a worker cannot
  // join itself). Idempotent: later callers wait for the first.
  void Shutdown();
  void Shutdown(std::chrono::milliseconds grace);
  // Async-signal-safe: an atomic store and one write(2); the supervisor
  // thread runs the shutdown with the configured grace.
  void RequestShutdown();
  // The grace of the shutdown under way (the configured one before any).
  std::chrono::milliseconds shutdown_grace() const {
    return std::chrono::milliseconds(active_grace_ms_.load(std::memory_order_acquire));
  }
  // Waits until stopped; false on timeout.
  bool WaitStopped(std::chrono::milliseconds timeout);

  admin::RuntimeState state() const {
    return state_.load(std::memory_order_acquire);
  }
  const Config& config() const { return config_; }
  bool IsWorkerThread() const { return scheduler_.IsWorkerThread(); }
  scheduler::Scheduler& scheduler() { return scheduler_; }

  // admin::AdminApi.
  admin::RuntimeSnapshot Snapshot() const override;
  absl::Status ResizeWorkers(std::size_t workers) override;
  absl::Status SetBlockingThreadsMax(std::size_t max_threads) override;
  absl::Status SetBlockingIdleTtl(std::chrono::milliseconds idle_ttl) override;
  absl::Status BeginShutdown(std::chrono::milliseconds grace) override;

 private:
  void SupervisorMain();
  // What the supervisor remembers of each worker between two samples.
  struct WorkerSample {
    std::uint64_t task_id = 0;
    std::uint64_t units_run = 0;
    std::int64_t first_seen_ns = 0;
    bool reported = false;
  };
  void SampleWorkers(std::vector<WorkerSample>& samples);
  void KeepReactorDriven();
  void MaybeStartStandIn();
  // The supervisor's list of held workers in its last sample (its thread only).
  std::vector<scheduler::Scheduler::HeldWorker> held_workers_;
  void RunShutdown(std::chrono::milliseconds grace);
  // Waits until no tracked task is in flight and the blocking pool is
  // idle, or until `deadline`. Returns true if everything finished.
  // With `blocking_too`, the blocking pool must be idle as well.
  bool WaitForQuiescence(std::chrono::steady_clock::time_point deadline,
                         bool blocking_too = true);
  void WakeSupervisor();
  // Requests a shutdown with `grace` for the supervisor to run; false if
  // the runtime is not running or one was requested or started already.
  bool RequestShutdownOnce(std::chrono::milliseconds grace);
  // Start's threads: supervisor eventfd, reactor thread, supervisor,
  // workers. An error leaves some started; Start then shuts them down.
  absl::Status StartThreads();

  const Config config_;
  std::unique_ptr<Driver> driver_;
  scheduler::SharedDriver shared_driver_;
  scheduler::Scheduler scheduler_;
  // Shared so jobs a shutdown abandons can keep it alive (see Shutdown).
  std::shared_ptr<blocking::BlockingPool> blocking_;
  std::atomic<admin::RuntimeState> state_{admin::RuntimeState::kCreated};
  std::atomic<std::chrono::steady_clock::rep> started_at_{0};

  // The dedicated reactor thread (ReactorMode::kDedicatedThread).
  std::thread reactor_thread_;
  std::atomic<bool> reactor_stop_{false};
  std::atomic<std::uint64_t> reactor_polls_{0};

  // Supervisor: woken through an eventfd so signal handlers can reach it.
  int supervisor_fd_ = -1;
  std::thread supervisor_;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<std::int64_t> requested_grace_ms_{-1};
  std::atomic<std::int64_t> active_grace_ms_;  // See shutdown_grace().
  std::atomic<bool> supervisor_stop_{false};
  std::atomic<std::uint64_t> stalls_detected_{0};

  std::mutex hooks_mu_;
  std::vector<std::function<void()>> drain_hooks_;   // Guarded by hooks_mu_.
  std::vector<std::function<void()>> cancel_hooks_;  // Guarded by hooks_mu_.
  std::function<void(const admin::StallReport&)> stall_handler_;  // hooks_mu_.

  std::mutex stop_mu_;
  std::condition_variable stopped_cv_;
  bool shutdown_started_ = false;  // Guarded by stop_mu_.
  // The thread running the shutdown: a hook on it that calls Shutdown
  // again must not wait for itself.
  std::atomic<std::thread::id> shutdown_runner_{};
};

}  // namespace mt::runtime

#endif  // MT_RUNTIME_RUNTIME_H_
