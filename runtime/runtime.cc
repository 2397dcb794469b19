#include "runtime/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/metrics/cycle_clock.h"

namespace mt::runtime {

using admin::RuntimeState;
using Clock = std::chrono::steady_clock;

namespace {

scheduler::SchedulerOptions SchedulerOptionsFor(const Config& config) {
  scheduler::SchedulerOptions options;
  options.thread_name_prefix = config.thread_name_prefix;
  options.lone_worker_fifo = config.lone_worker_fifo;
  options.max_workers = std::max<std::size_t>(
      config.max_worker_threads, ResolveWorkerThreads(config));
  return options;
}

blocking::BlockingPoolOptions BlockingOptionsFor(const Config& config) {
  return blocking::BlockingPoolOptions{
      .max_threads = std::max<std::size_t>(1, config.blocking_threads_max),
      .idle_ttl = config.blocking_idle_ttl,
      .thread_name_prefix = "mt-blocking",
  };
}

std::unique_ptr<Driver> CreateDriverOrNull() {
  absl::StatusOr<std::unique_ptr<Driver>> driver = Driver::Create();
  return driver.ok() ? std::move(*driver) : nullptr;
}

void DefaultStallHandler(const admin::StallReport& report) {
  std::fprintf(stderr,
               "mt_asyncio: worker %zu has been running task %llu for %.1f ms "
               "(stall)\n",
               report.worker_index,
               static_cast<unsigned long long>(report.task_id),
               static_cast<double>(report.running_ns) / 1e6);
}

}  // namespace

Runtime::Runtime(Config config, scheduler::WorkerHooks hooks)
    : config_(std::move(config)),
      driver_(CreateDriverOrNull()),
      scheduler_(SchedulerOptionsFor(config_), std::move(hooks),
                 &shared_driver_),
      blocking_(std::make_shared<blocking::BlockingPool>(BlockingOptionsFor(config_))),
      active_grace_ms_(config_.shutdown_grace.count()),
      stall_handler_(DefaultStallHandler) {
  shared_driver_.driver = driver_.get();
  shared_driver_.workers_drive = config_.reactor == ReactorMode::kWorkers;
}

Runtime::~Runtime() {
  Shutdown();
  if (supervisor_.joinable()) {
    supervisor_stop_.store(true, std::memory_order_release);
    WakeSupervisor();
    if (supervisor_.get_id() == std::this_thread::get_id()) {
      supervisor_.detach();
    } else {
      supervisor_.join();
    }
  }
  if (supervisor_fd_ >= 0) close(supervisor_fd_);
}

absl::Status Runtime::Start() {
  metrics::CycleClock::Anchor();  // Task ages and step times count from here.
  if (driver_ == nullptr) {
    return absl::InternalError("could not create the epoll reactor");
  }
  RuntimeState expected = RuntimeState::kCreated;
  if (!state_.compare_exchange_strong(expected, RuntimeState::kRunning,
                                      std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError("runtime was already started");
  }
  started_at_.store(Clock::now().time_since_epoch().count(),
                    std::memory_order_release);
  absl::Status status = StartThreads();
  if (!status.ok()) {
    // Half started is not running: stop what did start, so the runtime
    // reads as stopped (a new one may be made) and nothing waits on
    // workers that do not exist.
    Shutdown(std::chrono::milliseconds(0));
  }
  return status;
}

absl::Status Runtime::StartThreads() {
  supervisor_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (supervisor_fd_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("eventfd failed: ", strerror(errno)));
  }
  try {
    if (config_.reactor == ReactorMode::kDedicatedThread) {
      reactor_thread_ = std::thread([this] {
        pthread_setname_np(pthread_self(), "mt-reactor");
        while (!reactor_stop_.load(std::memory_order_acquire)) {
          driver_->Park(std::nullopt);
          reactor_polls_.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
    supervisor_ = std::thread([this] { SupervisorMain(); });
    return scheduler_.Start(ResolveWorkerThreads(config_));
  } catch (const std::system_error& e) {  // A thread could not be made.
    return absl::ResourceExhaustedError(absl::StrCat("cannot start a thread: ", e.what()));
  }
}

absl::Status Runtime::Spawn(absl::AnyInvocable<void() &&> fn) {
  return scheduler_.Spawn(std::move(fn));
}

absl::Status Runtime::Spawn(task::Task* task) { return scheduler_.Spawn(task); }

void Runtime::AddDrainHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hooks_mu_);
  drain_hooks_.push_back(std::move(hook));
}

void Runtime::AddCancelHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hooks_mu_);
  cancel_hooks_.push_back(std::move(hook));
}

void Runtime::SetStallHandler(
    std::function<void(const admin::StallReport&)> handler) {
  std::lock_guard<std::mutex> lock(hooks_mu_);
  stall_handler_ = std::move(handler);
}

void Runtime::WakeSupervisor() {
  if (supervisor_fd_ < 0) return;
  const std::uint64_t one = 1;
  (void)!write(supervisor_fd_, &one, sizeof(one));
}

void Runtime::RequestShutdown() {
  shutdown_requested_.store(true, std::memory_order_release);
  WakeSupervisor();
}

bool Runtime::RequestShutdownOnce(std::chrono::milliseconds grace) {
  {
    // Checked and set together: of callers racing here exactly one wins,
    // and the grace the supervisor reads is the winner's.
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (state() != RuntimeState::kRunning || shutdown_started_ ||
        shutdown_requested_.load(std::memory_order_acquire)) {
      return false;
    }
    requested_grace_ms_.store(grace.count(), std::memory_order_release);
    shutdown_requested_.store(true, std::memory_order_release);
  }
  WakeSupervisor();
  return true;
}

absl::Status Runtime::BeginShutdown(std::chrono::milliseconds grace) {
  if (!RequestShutdownOnce(grace)) {
    return absl::FailedPreconditionError("runtime is not running");
  }
  return absl::OkStatus();
}

void Runtime::Shutdown() { Shutdown(config_.shutdown_grace); }

void Runtime::Shutdown(std::chrono::milliseconds grace) {
  if (IsWorkerThread()) {
    RequestShutdownOnce(grace);  // Already requested: that one stands.
    return;
  }
  if (shutdown_runner_.load(std::memory_order_acquire) ==
      std::this_thread::get_id()) {
    return;  // Called from a shutdown hook.
  }
  {
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (shutdown_started_) {
      // Someone else runs it; wait unless that someone needs us to return
      // (the supervisor never waits on itself: it is the runner then).
      stopped_cv_.wait(lock, [this] { return state() == RuntimeState::kStopped; });
      return;
    }
    shutdown_started_ = true;
  }
  RunShutdown(grace);
}

bool Runtime::WaitStopped(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return stopped_cv_.wait_for(
      lock, timeout, [this] { return state() == RuntimeState::kStopped; });
}

bool Runtime::WaitForQuiescence(Clock::time_point deadline, bool blocking_too) {
  // Polling at 1 ms keeps the workers free of any shutdown bookkeeping on
  // their hot path; shutdown is rare and this thread has nothing else to do.
  while (true) {
    if (scheduler_.tasks_in_flight() == 0 && scheduler_.IsQuiescent() &&
        (!blocking_too || blocking_->IsIdle())) {
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Runtime::RunShutdown(std::chrono::milliseconds grace) {
  shutdown_runner_.store(std::this_thread::get_id(), std::memory_order_release);
  active_grace_ms_.store(grace.count(), std::memory_order_release);
  const RuntimeState was = state();
  if (was == RuntimeState::kCreated) {
    // Never started: nothing runs, nothing to drain.
    state_.store(RuntimeState::kStopping, std::memory_order_release);
  } else {
    // Draining: servers stop accepting; in-flight work continues.
    state_.store(RuntimeState::kDraining, std::memory_order_release);
    std::vector<std::function<void()>> drain, cancel;
    {
      std::lock_guard<std::mutex> lock(hooks_mu_);
      drain = drain_hooks_;
      cancel = cancel_hooks_;
    }
    // The grace counts from here: drain hooks that wait for work to wind
    // down (the Python runs) spend it, they do not extend it.
    const Clock::time_point grace_over = Clock::now() + grace;
    for (auto& hook : drain) hook();
    const bool drained = WaitForQuiescence(grace_over);

    // Cancelling: a hook cancels what is left and gets a short while to
    // unwind; then the scheduler cancels everything still queued.
    state_.store(RuntimeState::kCancelling, std::memory_order_release);
    if (!drained) {
      for (auto& hook : cancel) hook();
      // Cancelled tasks unwind; blocking jobs had the whole grace and are
      // not waited for again (one that never returns is abandoned below).
      const auto unwind = std::min<std::chrono::milliseconds>(
          grace, std::chrono::milliseconds(1'000));
      WaitForQuiescence(Clock::now() + unwind, /*blocking_too=*/false);
    }
    state_.store(RuntimeState::kStopping, std::memory_order_release);
  }

  scheduler_.Close();
  if (reactor_thread_.joinable()) {
    reactor_stop_.store(true, std::memory_order_release);
    driver_->Unpark();
    reactor_thread_.join();
  }
  scheduler_.Join();
  // Blocking jobs had the grace (and the unwind) to finish: one still
  // running (a to_thread call that never returns) must not hold the
  // process, so it is abandoned and reported.
  const std::size_t abandoned =
      blocking_->Shutdown(Clock::now() + std::chrono::milliseconds(100));
  if (abandoned > 0) {
    std::fprintf(stderr,
                 "mt_asyncio: shutdown abandoned %zu blocking job(s) still running "
                 "after the grace period\n",
                 abandoned);
  }
  if (driver_ != nullptr) driver_->Shutdown();
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    state_.store(RuntimeState::kStopped, std::memory_order_release);
  }
  stopped_cv_.notify_all();
  supervisor_stop_.store(true, std::memory_order_release);
  WakeSupervisor();
}

void Runtime::SupervisorMain() {
  pthread_setname_np(pthread_self(), "mt-supervisor");
  std::vector<WorkerSample> samples;
  // Sample at a quarter of the stall threshold (a stall is reported at
  // most 25% late), or every 50 ms to keep "running since" estimates for
  // the admin view when the detector is off.
  const std::int64_t threshold_ms = config_.stall_threshold.count();
  const int scan_ms =
      threshold_ms > 0
          ? static_cast<int>(std::max<std::int64_t>(1, threshold_ms / 4))
          : 50;
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
  const std::size_t n = scheduler_.slot_count();
  if (samples.size() < n) samples.resize(n);
  bool held_since_last_sample = false;
  for (std::size_t i = 0; i < n; ++i) {
    metrics::WorkerMetrics* m = scheduler_.MutableWorkerMetrics(i);
    if (m == nullptr) continue;
    WorkerSample& s = samples[i];
    const std::uint64_t units = m->units_run.load(std::memory_order_acquire);
    const std::uint64_t id = m->current_task_id.load(std::memory_order_acquire);
    if (id == 0) {
      s = WorkerSample{};
      continue;
    }
    if (id != s.task_id || units != s.units_run) {
      s = WorkerSample{.task_id = id, .units_run = units, .first_seen_ns = now};
      m->since_units_run.store(units, std::memory_order_relaxed);
      m->current_since_ns.store(now, std::memory_order_release);
      continue;
    }
    held_since_last_sample = true;
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
      });
    }
  }
  if (held_since_last_sample) KeepReactorDriven();
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
  if (driver_->timers().pending() == 0 && driver_->io().registered() == 0) return;
  if (!shared_driver_.lock.try_lock()) return;  // Somebody drives it.
  shared_driver_.lock.unlock();
  scheduler_.WakeOneParked();
}

absl::Status Runtime::ResizeWorkers(std::size_t workers) {
  if (state() != RuntimeState::kRunning) {
    return absl::FailedPreconditionError("runtime is not running");
  }
  return scheduler_.Resize(workers);
}

absl::Status Runtime::SetBlockingThreadsMax(std::size_t max_threads) {
  return blocking_->SetMaxThreads(max_threads);
}

absl::Status Runtime::SetBlockingIdleTtl(std::chrono::milliseconds idle_ttl) {
  return blocking_->SetIdleTtl(idle_ttl);
}

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
