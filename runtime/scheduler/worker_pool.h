#ifndef MT_RUNTIME_SCHEDULER_WORKER_POOL_H_
#define MT_RUNTIME_SCHEDULER_WORKER_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "runtime/scheduler/injector.h"
#include "runtime/scheduler/unit.h"

namespace mt::runtime::scheduler {

// Callbacks run on each worker thread. The Python layer uses them to attach
// a worker to the interpreter for its lifetime and to detach around parking.
// Every hook is optional; `worker_index` is stable for the worker's life.
struct WorkerHooks {
  std::function<void(std::size_t worker_index)> on_start;
  std::function<void(std::size_t worker_index)> on_stop;
  std::function<void(std::size_t worker_index)> before_park;
  std::function<void(std::size_t worker_index)> after_unpark;
};

// Counters one worker publishes. Written only by that worker, read by
// anyone with relaxed loads, so reading them never stalls the worker.
struct WorkerStats {
  std::atomic<std::uint64_t> units_run{0};
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> busy_ns{0};
};

// A fixed set of OS threads that run units taken from a shared injector.
//
// Lifecycle: Start() once, Spawn() from any thread, Shutdown() from any
// thread (from a worker it only stops intake). Shutdown closes the injector,
// lets the workers run every unit already queued, then joins them; it is
// idempotent.
// This is the first piece of the scheduler: local queues, stealing and
// resizing build on it.
class WorkerPool {
 public:
  WorkerPool(std::size_t workers, std::string thread_name_prefix,
             WorkerHooks hooks);
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  absl::Status Start();
  // Queues a unit. Fails with FailedPrecondition before Start or after
  // Shutdown began; the unit is then destroyed without running.
  absl::Status Spawn(Unit unit);
  void Shutdown();

  std::size_t size() const { return stats_.size(); }
  std::size_t live_workers() const {
    return live_workers_.load(std::memory_order_acquire);
  }
  std::size_t queued() const { return injector_.size(); }
  const WorkerStats& stats(std::size_t worker_index) const {
    return *stats_[worker_index];
  }
  // True on a thread owned by this pool.
  bool IsWorkerThread() const;

 private:
  void WorkerMain(std::size_t index);

  const std::string thread_name_prefix_;
  const WorkerHooks hooks_;
  Injector injector_;
  std::vector<std::unique_ptr<WorkerStats>> stats_;
  std::atomic<std::size_t> live_workers_{0};

  std::mutex lifecycle_mu_;
  bool started_ = false;              // Guarded by lifecycle_mu_.
  bool shut_down_ = false;            // Guarded by lifecycle_mu_.
  std::vector<std::thread> threads_;  // Guarded by lifecycle_mu_.
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_WORKER_POOL_H_
