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

}  // namespace mt::runtime
