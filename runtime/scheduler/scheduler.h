#ifndef MT_RUNTIME_SCHEDULER_SCHEDULER_H_
#define MT_RUNTIME_SCHEDULER_SCHEDULER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "runtime/metrics/worker_metrics.h"
#include "runtime/scheduler/hooks.h"
#include "runtime/scheduler/idle.h"
#include "runtime/scheduler/injector.h"
#include "runtime/scheduler/local_queue.h"
#include "runtime/scheduler/park.h"
#include "runtime/task/task.h"

namespace mt::runtime::scheduler {

struct SchedulerOptions {
  std::string thread_name_prefix = "mt-worker";
  // Upper bound for live resizing; worker slots are never freed before the
  // scheduler is, so stealers can index them without a lock.
  std::size_t max_workers = 256;
  // Every Nth tick a worker looks at the injector first (fairness for work
  // from outside), and every Mth tick it polls the reactor without sleeping
  // (so I/O and timers progress while every worker is busy).
  std::uint32_t global_queue_interval = 31;
  std::uint32_t event_interval = 61;
  // Consecutive runs from the LIFO slot before its task is sent to the back
  // of the queue; stops a ping-pong pair from starving everything else.
  std::uint32_t max_lifo_polls = 3;
  // With a single worker, wakes go to the back of its queue instead of the
  // LIFO slot: units run in the order they were scheduled, as asyncio's one
  // thread runs its ready queue, so code that relies on that order works
  // unchanged on one worker. With more workers no order holds anyway.
  bool lone_worker_fifo = true;
  // A worker retired by a resize keeps its thread, asleep, and a later
  // resize up wakes it instead of starting a thread. What a thread costs
  // beyond its stack (the Python layer's interpreter state and allocator
  // heaps, malloc arenas) is then made once per slot, not once per resize:
  // a service resized every few seconds keeps a flat RSS.
  bool keep_retired_threads = true;
  // A worker that found nothing to run keeps looking this long before it
  // parks (while it holds a searcher's place, so producers wake nobody
  // meanwhile). 0: park at once.
  std::uint32_t idle_spin_us = 20;
};

// The multi-threaded work-stealing scheduler.
//
//   outside threads ──push──► Injector (global FIFO) ◄──batches── workers
//   worker k: LIFO slot + LocalQueue (ring of 256) ◄──steal half── others
//
// A worker runs its LIFO slot (the unit it just woke; none when it is the
// only worker and lone_worker_fifo holds), then its own queue,
// then the injector, then steals from random victims, and finally parks:
// on the shared reactor if nobody else drives it, else on its condition
// variable. Idle tracks searching/parked workers so a push wakes at most one
// sleeper and never none when one is needed.
class Scheduler final : public task::Executor {
 public:
  Scheduler(SchedulerOptions options, WorkerHooks hooks, SharedDriver* driver);
  ~Scheduler() override;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  absl::Status Start(std::size_t workers);

  // Queues a new task created in the kScheduled state (its one reference
  // moves to the queue); counted as in flight until it completes.
  absl::Status Spawn(task::Task* task);
  absl::Status Spawn(absl::AnyInvocable<void() &&> fn);

  // task::Executor.
  void Schedule(task::Task* task, task::ScheduleKind kind) override;
  void OnComplete(task::Task* task) override;
  bool KeepsRounds() const override;

  // Live resize: start workers up to `workers` (waking dormant ones
  // first), or ask the highest-numbered ones to retire (each finishes its
  // current unit, hands its queue to the injector and then sleeps dormant,
  // or exits without keep_retired_threads). Returns at once; exited threads
  // are joined by a later Resize or by Join, dormant ones by Join.
  absl::Status Resize(std::size_t workers);

  // Stops scheduling: from now on every queued task and every task woken
  // runs its cancel path instead of Poll, and workers exit once their
  // queues are drained. Idempotent, any thread.
  void Close();
  // Joins every worker (not from a worker) and cancels anything still
  // queued. Idempotent.
  void Join();

  bool IsWorkerThread() const;
  // Index of the calling worker, or -1.
  int CurrentWorkerIndex() const;
  // Wakes every parked worker (shutdown, tests).
  void UnparkAll();
  // Every worker runs its after_unpark, before_idle and before_park hooks
  // once more, soon: a parked one without leaving its park, a busy one
  // when it next parks. What a layer lets go of there (the Python layer: a
  // closed loop a worker still refers to, objects other threads queued for
  // it to free) is let go of by idle workers too.
  void RerunParkHooks();
  // Wakes one parked worker, searching limits aside; false if none sleeps.
  // The supervisor uses it to get the reactor driven again (a worker that
  // parks takes the reactor when nobody holds it).
  bool WakeOneParked() { return NotifyParked(/*unthrottled=*/true); }

  // A worker slot the supervisor saw held by one unit: the slot and its
  // units_run count then (unchanged while that unit still runs).
  struct HeldWorker {
    std::size_t index;
    std::uint64_t units_run;
  };
  // A stand-in worker (stand_in.cc) for when every worker is held by one
  // unit, typically a step blocked until work queued behind it is done:
  // run_coroutine_threadsafe(...).result() on another loop at one worker.
  // Starts one thread, unless one runs already or a worker in `held` has
  // moved on, which runs what the injector holds (and drives the reactor
  // when that is empty) until one of those workers finishes its unit. It
  // never runs a unit whose domain is that of a held unit, so a loop whose
  // step holds a worker still runs one unit at a time, in order. Returns
  // whether it started one.
  bool StartStandIn(const std::vector<HeldWorker>& held);
  bool StandInRunning() const {
    return stand_in_running_.load(std::memory_order_acquire);
  }
  std::uint64_t stand_ins_started() const {
    return stand_ins_started_.load(std::memory_order_relaxed);
  }
  std::uint64_t stand_in_units_run() const {
    return stand_in_units_run_.load(std::memory_order_relaxed);
  }

  // Metrics. Every read is a relaxed load; nothing waits for a worker.
  std::size_t target_workers() const {
    return target_workers_.load(std::memory_order_acquire);
  }
  std::size_t live_workers() const {
    return live_workers_.load(std::memory_order_acquire);
  }
  // Number of worker slots ever used (indices are < this).
  std::size_t max_workers() const { return options_.max_workers; }
  std::size_t slot_count() const {
    return slot_high_water_.load(std::memory_order_acquire);
  }
  // False for a slot that has no worker thread now.
  bool SlotActive(std::size_t index) const;
  const metrics::WorkerMetrics* WorkerMetrics(std::size_t index) const;
  // For the runtime's supervisor, which publishes its "running since"
  // estimates there.
  metrics::WorkerMetrics* MutableWorkerMetrics(std::size_t index);
  std::uint32_t LocalQueueDepth(std::size_t index) const;
  // Whether the slot's worker is retiring (resize down), and whether it
  // is asleep in the reactor right now. Racy reads for the admin view.
  bool SlotRetiring(std::size_t index) const;
  bool SlotDrivesReactor(std::size_t index) const;
  std::size_t injector_depth() const { return injector_.Len(); }
  std::size_t tasks_in_flight() const;
  std::size_t num_searching() const { return idle_.num_searching(); }
  std::size_t num_parked() const;
  // True when nothing is queued anywhere and no worker is running a unit.
  bool IsQuiescent() const;
  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  // kDormant: retired, its thread asleep until a resize wakes it (back to
  // kRunning) or the scheduler closes (then it exits).
  enum class SlotStatus : int {
    kUnused,
    kRunning,
    kRetiring,
    kDormant,
    kExited
  };
  struct WorkerSlot {
    explicit WorkerSlot(SharedDriver* driver) : parker(driver) {}
    LocalQueue queue;
    Parker parker;
    metrics::WorkerMetrics metrics;
    std::atomic<SlotStatus> status{SlotStatus::kUnused};
    std::atomic<std::uint64_t> spawned{0};
    std::atomic<std::uint64_t> completed{0};
    // Set by RerunParkHooks, taken by the worker when its park wakes.
    std::atomic<bool> rerun_park_hooks{false};
    std::thread thread;  // Guarded by the scheduler's lifecycle_mu_.
    // A dormant worker waits on this; status changes to and from kDormant
    // are made under the mutex, so no wake is lost.
    std::mutex dormant_mu;
    std::condition_variable dormant_cv;
  };

 public:
  // A worker thread's private state; defined in scheduler.cc.
  class Worker;

 private:
  absl::Status StartWorkerLocked(std::size_t index);
  // Wakes a dormant worker as a running one (lifecycle_mu_ held).
  void ReviveWorkerLocked(std::size_t index);
  void WorkerMain(std::size_t index);
  // A retired worker's sleep: true when a resize revived it, false when
  // the scheduler closed.
  bool SleepDormant(WorkerSlot& slot, std::size_t index);
  // Wakes `slot`'s worker if it sleeps dormant, so it sees its new status
  // or the scheduler closed.
  void WakeDormant(WorkerSlot& slot);
  // WakeDormant for every slot.
  void WakeDormant();
  void PushLocal(WorkerSlot& slot, task::Task* task);
  // Wakes one sleeper if the Idle protocol says one is needed; true if it
  // did.
  bool NotifyParked(bool unthrottled,
                    std::optional<std::size_t> exclude = std::nullopt);
  // Wakes a worker if any queue holds work (the last searcher's duty).
  void NotifyIfWorkPending(std::optional<std::size_t> exclude);
  bool AnyLocalWork(std::optional<std::size_t> exclude) const;
  // Runs the cancel path of a task that can no longer be scheduled.
  void CancelInline(task::Task* task);
  void StandInMain(std::vector<HeldWorker> held,
                   std::vector<std::uintptr_t> held_domains);
  bool StillHeld(const std::vector<HeldWorker>& held) const;
  // Moves what the held workers' queues hold to the injector's end, in
  // their order (stand_in.cc).
  void AdoptHeldQueues(const std::vector<HeldWorker>& held);
  void JoinStandIn();
  void DrainInjectorCancelled();

  const SchedulerOptions options_;
  const WorkerHooks hooks_;
  SharedDriver* const driver_;
  Injector injector_;
  Idle idle_;
  std::unique_ptr<std::atomic<WorkerSlot*>[]> slots_;
  std::atomic<std::size_t> slot_high_water_{0};
  std::atomic<std::size_t> target_workers_{0};
  std::atomic<std::size_t> live_workers_{0};
  std::atomic<std::uint64_t> external_spawned_{0};
  std::atomic<std::uint64_t> external_completed_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> joined_{false};

  std::mutex lifecycle_mu_;
  bool started_ = false;  // Guarded by lifecycle_mu_.

  std::mutex stand_in_mu_;
  std::thread stand_in_thread_;  // Guarded by stand_in_mu_.
  std::atomic<bool> stand_in_running_{false};
  Parker stand_in_parker_;
  // Where the stand-in steals into (it is this queue's one owner).
  LocalQueue stand_in_queue_;
  std::atomic<std::uint64_t> stand_ins_started_{0};
  std::atomic<std::uint64_t> stand_in_units_run_{0};
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_SCHEDULER_H_
