// The supervisor thread (mt-supervisor): runs shutdowns requested from
// workers and signal handlers, samples the workers for the stall detector
// and the admin view, and keeps the reactor driven while every worker is
// held by a unit.

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/metrics/cycle_clock.h"
#include "runtime/runtime.h"

namespace mt::runtime {

using admin::RuntimeState;
using Clock = std::chrono::steady_clock;

void Runtime::WakeSupervisor() {
  if (supervisor_fd_ < 0) return;
  const std::uint64_t one = 1;
  (void)!write(supervisor_fd_, &one, sizeof(one));
}
void Runtime::SupervisorMain() {
  pthread_setname_np(pthread_self(), "mt-supervisor");
  std::vector<WorkerSample> samples;
  // Sample at a quarter of the stall threshold (a stall is reported at
  // most 25% late), or every 50 ms to keep "running since" estimates for
  // the admin view when the detector is off.
  const std::int64_t threshold_ms = config_.stall_threshold.count();
  std::int64_t scan = threshold_ms > 0 ? std::max<std::int64_t>(1, threshold_ms / 4) : 50;
  // A stand-in starts between stand_in_after and twice that.
  const std::int64_t stand_in_ms = config_.stand_in_after.count();
  if (stand_in_ms > 0) scan = std::min(scan, stand_in_ms);
  const int scan_ms = static_cast<int>(scan);
  while (!supervisor_stop_.load(std::memory_order_acquire)) {
    pollfd p{supervisor_fd_, POLLIN, 0};
    const int n = poll(&p, 1, scan_ms);
    if (n > 0) {
      std::uint64_t drained;
      (void)!read(supervisor_fd_, &drained, sizeof(drained));
    }
    if (supervisor_stop_.load(std::memory_order_acquire)) break;
    if (shutdown_requested_.load(std::memory_order_acquire)) {
      bool run = false;
      {
        std::lock_guard<std::mutex> lock(stop_mu_);
        if (!shutdown_started_) {
          shutdown_started_ = true;
          run = true;
        }
      }
      if (run) {
        const std::int64_t ms = requested_grace_ms_.load(std::memory_order_acquire);
        RunShutdown(ms >= 0 ? std::chrono::milliseconds(ms)
                            : config_.shutdown_grace);
      }
      break;
    }
    SampleWorkers(samples);
  }
}

// Workers never read the clock per unit; instead this thread samples each
// worker's (current task id, units run) pair. The same pair on consecutive
// samples means one unit has held the worker at least since the first of
// them: an underestimate by less than one sampling interval, so a stall is
// never reported early.
void Runtime::SampleWorkers(std::vector<WorkerSample>& samples) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               Clock::now().time_since_epoch())
                               .count();
  const std::int64_t threshold_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          config_.stall_threshold)
          .count();
  const std::int64_t stand_in_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(config_.stand_in_after).count();
  const std::size_t n = scheduler_.slot_count();
  if (samples.size() < n) samples.resize(n);
  bool held_since_last_sample = false;
  // Whether every worker has been held by one unit for stand_in_after.
  bool all_held = stand_in_ns > 0;
  held_workers_.clear();
  for (std::size_t i = 0; i < n; ++i) {
    metrics::WorkerMetrics* m = scheduler_.MutableWorkerMetrics(i);
    if (m == nullptr) continue;
    WorkerSample& s = samples[i];
    const bool active = scheduler_.SlotActive(i);
    const std::uint64_t units = m->units_run.load(std::memory_order_acquire);
    const std::uint64_t id = m->current_task_id.load(std::memory_order_acquire);
    if (id == 0) {
      s = WorkerSample{};
      if (active) all_held = false;
      continue;
    }
    if (id != s.task_id || units != s.units_run) {
      s = WorkerSample{.task_id = id, .units_run = units, .first_seen_ns = now};
      m->since_units_run.store(units, std::memory_order_relaxed);
      m->current_since_ns.store(now, std::memory_order_release);
      if (active) all_held = false;
      continue;
    }
    held_since_last_sample = true;
    if (active) {
      if (now - s.first_seen_ns < stand_in_ns) all_held = false;
      held_workers_.push_back({.index = i, .units_run = units});
    }
    if (threshold_ns <= 0 || s.reported || now - s.first_seen_ns < threshold_ns) {
      continue;
    }
    s.reported = true;  // One report per stalled run.
    stalls_detected_.fetch_add(1, std::memory_order_relaxed);
    std::function<void(const admin::StallReport&)> handler;
    {
      std::lock_guard<std::mutex> lock(hooks_mu_);
      handler = stall_handler_;
    }
    if (handler) {
      handler(admin::StallReport{
          .worker_index = i,
          .task_id = id,
          .running_ns = static_cast<std::uint64_t>(now - s.first_seen_ns),
          .units_run = units,
          .thread_ident = m->pthread_id.load(std::memory_order_relaxed),
          .os_thread_id = m->os_thread_id.load(std::memory_order_relaxed),
      });
    }
  }
  if (held_since_last_sample) KeepReactorDriven();
  if (all_held && !held_workers_.empty()) MaybeStartStandIn();
}

// Every worker is held by one unit: if anything waits that a worker would
// run (units queued anywhere, timers, registrations the reactor must
// watch), a
// stand-in runs it; see Scheduler::StartStandIn for what it leaves alone.
void Runtime::MaybeStartStandIn() {
  if (scheduler_.StandInRunning()) return;
  bool queued_behind = false;  // A held worker's own queue.
  for (const auto& h : held_workers_) {
    if (scheduler_.LocalQueueDepth(h.index) > 0) queued_behind = true;
  }
  const bool waiting =
      queued_behind || scheduler_.injector_depth() > 0 ||
      (driver_ != nullptr && shared_driver_.workers_drive && driver_->HasWork());
  if (waiting) scheduler_.StartStandIn(held_workers_);
}

// Workers drive the reactor only when they park: the first to park takes
// it, the others sleep on condition variables. A worker that leaves the
// reactor to run units and then stays in one (a coroutine calling
// time.sleep, a long computation) leaves timers and I/O undriven while the
// others sleep. So when a unit has held a worker since the last sample and
// timers or registrations are pending with nobody in the reactor, wake a
// sleeper: it finds nothing to run, parks again, and takes the reactor.
// Checked here rather than on every wake so that the hot paths pay
// nothing; a timer is then at most one sampling interval late.
void Runtime::KeepReactorDriven() {
  if (driver_ == nullptr || !shared_driver_.workers_drive) return;
  if (!driver_->HasWork()) return;
  if (!shared_driver_.lock.try_lock()) return;  // Somebody drives it.
  shared_driver_.lock.unlock();
  scheduler_.WakeOneParked();
}

}  // namespace mt::runtime
