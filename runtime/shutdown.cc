// Coordinated shutdown: requests (from any thread, a signal handler, the
// control plane) and the state machine the supervisor or the caller runs:
// running -> draining (servers stop accepting) -> grace period ->
// cancelling (what is left is cancelled) -> stopped.

#include <chrono>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "runtime/runtime.h"

namespace mt::runtime {

using admin::RuntimeState;
using Clock = std::chrono::steady_clock;

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

}  // namespace mt::runtime
