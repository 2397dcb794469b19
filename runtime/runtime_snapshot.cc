// Runtime::Snapshot(): the admin view of the runtime (state, live
// configuration, per-worker counters and states, the blocking pool).

#include "runtime/admin/snapshot.h"
#include "runtime/runtime.h"

namespace mt::runtime {

using admin::RuntimeState;
using Clock = std::chrono::steady_clock;

namespace {

admin::WorkerState WorkerStateOf(const metrics::WorkerMetrics& m, bool active,
                                 bool retiring, bool driving_reactor) {
  using admin::WorkerState;
  if (!active) return WorkerState::kExited;
  if (retiring) return WorkerState::kRetiring;
  if (m.current_task_id.load(std::memory_order_acquire) != 0) {
    return WorkerState::kRunning;
  }
  switch (m.phase.load(std::memory_order_relaxed)) {
    case metrics::WorkerPhase::kStarting:
      return WorkerState::kStarting;
    case metrics::WorkerPhase::kActive:
      return WorkerState::kIdle;
    case metrics::WorkerPhase::kSearching:
      return WorkerState::kSearching;
    case metrics::WorkerPhase::kParked:
      return driving_reactor ? WorkerState::kDrivingReactor : WorkerState::kParked;
    case metrics::WorkerPhase::kExited:
      return WorkerState::kExited;
  }
  return WorkerState::kIdle;
}

}  // namespace

admin::RuntimeSnapshot Runtime::Snapshot() const {
  admin::RuntimeSnapshot snap;
  snap.state = state();
  snap.config = config_;
  snap.worker_threads = scheduler_.target_workers();
  if (snap.worker_threads == 0) snap.worker_threads = ResolveWorkerThreads(config_);
  snap.live_workers = scheduler_.live_workers();
  snap.max_workers = scheduler_.max_workers();
  snap.searching_workers = scheduler_.num_searching();
  snap.parked_workers = scheduler_.num_parked();
  snap.injector_depth = scheduler_.injector_depth();
  snap.tasks_in_flight = scheduler_.tasks_in_flight();
  if (driver_ != nullptr) {
    snap.timers_pending = driver_->timers().pending();
    snap.fds_registered = driver_->io().registered();
  }
  snap.stalls_detected = stalls_detected_.load(std::memory_order_relaxed);
  snap.stand_ins_started = scheduler_.stand_ins_started();
  snap.stand_in_units_run = scheduler_.stand_in_units_run();
  snap.dedicated_reactor_polls = reactor_polls_.load(std::memory_order_relaxed);
  const auto started = started_at_.load(std::memory_order_acquire);
  const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  Clock::now().time_since_epoch())
                                  .count();
  if (started != 0) {
    snap.uptime_seconds = std::chrono::duration<double>(
                              Clock::duration(Clock::now().time_since_epoch().count() -
                                              started))
                              .count();
  }
  snap.blocking = blocking_->Stats();
  const std::int64_t threshold_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          config_.stall_threshold)
          .count();
  const std::size_t slots = scheduler_.slot_count();
  snap.workers.reserve(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    const metrics::WorkerMetrics* m = scheduler_.WorkerMetrics(i);
    if (m == nullptr) continue;
    admin::WorkerSnapshot w;
    w.index = i;
    w.active = scheduler_.SlotActive(i);
    w.units_run = m->units_run.load(std::memory_order_relaxed);
    w.parks = m->parks.load(std::memory_order_relaxed);
    w.busy_ns = m->busy_ns.load(std::memory_order_relaxed);
    const std::int64_t busy_since = m->busy_since_ns.load(std::memory_order_relaxed);
    if (busy_since != 0 && now_ns > busy_since) {
      w.busy_ns += static_cast<std::uint64_t>(now_ns - busy_since);
    }
    w.steals = m->steals.load(std::memory_order_relaxed);
    w.stolen_units = m->stolen_units.load(std::memory_order_relaxed);
    w.stolen_from = m->stolen_from.load(std::memory_order_relaxed);
    w.reactor_polls = m->reactor_polls.load(std::memory_order_relaxed);
    w.overflows = m->overflows.load(std::memory_order_relaxed);
    w.local_queue_depth = scheduler_.LocalQueueDepth(i);
    w.os_thread_id = m->os_thread_id.load(std::memory_order_relaxed);
    w.state = WorkerStateOf(*m, w.active, scheduler_.SlotRetiring(i),
                            scheduler_.SlotDrivesReactor(i));
    w.lifo_occupied = m->lifo_occupied.load(std::memory_order_relaxed);
    w.current_task_id = m->current_task_id.load(std::memory_order_acquire);
    const std::int64_t since = m->current_since_ns.load(std::memory_order_acquire);
    const bool since_is_current =
        m->since_units_run.load(std::memory_order_relaxed) == w.units_run;
    if (w.current_task_id != 0 && since_is_current && since != 0 &&
        now_ns > since) {
      w.current_task_running_ns = static_cast<std::uint64_t>(now_ns - since);
      w.stalled = threshold_ns > 0 &&
                  static_cast<std::int64_t>(w.current_task_running_ns) >= threshold_ns;
    }
    snap.workers.push_back(w);
  }
  return snap;
}

}  // namespace mt::runtime
