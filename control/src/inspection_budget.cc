#include "control/src/inspection_budget.h"

#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <utility>

namespace mt::control {
namespace {

// How often a waiting caller looks whether its client is still there.
constexpr std::chrono::milliseconds kCancelPoll{50};
// How long the control plane must have been quiet before a trim.
constexpr std::chrono::seconds kQuietBeforeTrim{1};

double Nanos(std::chrono::milliseconds d) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Gives the allocator's free pages back to the system (glibc only: its
// per-thread arenas keep what a large page used otherwise).
void TrimHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

InspectionBudget::InspectionBudget(InspectionLimits limits)
    : max_wait_(limits.max_wait),
      admin_{limits.admin_cpu_share, Nanos(limits.admin_burst),
             Nanos(limits.admin_burst)},
      read_only_{limits.read_only_cpu_share, Nanos(limits.read_only_burst),
                 Nanos(limits.read_only_burst)},
      last_refill_(Clock::now()) {
  thread_ = std::thread([this] { Serve(); });
}

InspectionBudget::~InspectionBudget() {
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

std::int64_t InspectionBudget::ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void InspectionBudget::Refill(Clock::time_point now) {
  const double elapsed =
      std::chrono::duration<double, std::nano>(now - last_refill_).count();
  for (Bucket* b : {&admin_, &read_only_}) {
    b->tokens_ns = std::min(b->burst_ns, b->tokens_ns + elapsed * b->share);
  }
  last_refill_ = now;
}

absl::Status InspectionBudget::Acquire(bool admin,
                                       const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto give_up = Clock::now() + max_wait_;
  Bucket& bucket = admin ? admin_ : read_only_;
  if (admin) ++admins_waiting_;
  for (;;) {
    const auto now = Clock::now();
    Refill(now);
    const bool lane_free = !busy_ && (admin || admins_waiting_ == 0);
    const bool in_budget = bucket.tokens_ns > 0;
    if (lane_free && in_budget) break;
    if (cancelled && cancelled()) {
      if (admin) --admins_waiting_;
      // An admin leaving may free the lane for others.
      turn_over_.notify_all();
      return absl::CancelledError(
          "the client went away while waiting to inspect");
    }
    if (!admin && now >= give_up) {
      ++refused_;
      return absl::ResourceExhaustedError(
          "inspection is over its CPU share for read-only callers; try again "
          "later");
    }
    auto wake = now + kCancelPoll;
    if (lane_free) {
      // Only the budget holds this caller: sleep until it is back above 0.
      wake =
          std::min(wake, now + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double, std::nano>(
                                       -bucket.tokens_ns / bucket.share + 1)));
    }
    if (!admin) wake = std::min(wake, give_up);
    turn_over_.wait_until(lock, wake);
    if (lane_free) {  // That wait was for the budget.
      throttled_ns_ += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                               now)
              .count());
    }
  }
  if (admin) --admins_waiting_;
  busy_ = true;
  return absl::OkStatus();
}

void InspectionBudget::Release(bool admin, std::int64_t cpu_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Refill(Clock::now());
    (admin ? admin_ : read_only_).tokens_ns -=
        static_cast<double>(std::max<std::int64_t>(cpu_ns, 0));
    busy_ = false;
  }
  turn_over_.notify_all();
}

absl::Status InspectionBudget::Run(bool admin,
                                   const std::function<bool()>& cancelled,
                                   const std::function<void()>& work) {
  if (absl::Status s = Acquire(admin, cancelled); !s.ok()) return s;
  std::int64_t cpu_ns;
  {
    std::unique_lock<std::mutex> lock(work_mu_);
    work_ = &work;
    work_done_ = false;
    work_cv_.notify_all();
    work_cv_.wait(lock, [this] { return work_done_; });
    cpu_ns = work_cpu_ns_;
  }
  Release(admin, cpu_ns);
  return absl::OkStatus();
}

void InspectionBudget::RequestTrim() {
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    trim_wanted_ = true;
    last_activity_ = Clock::now();
  }
  work_cv_.notify_all();
}

void InspectionBudget::Serve() {
  std::unique_lock<std::mutex> lock(work_mu_);
  const auto ready = [this] { return stop_ || work_ != nullptr; };
  for (;;) {
    if (!trim_wanted_) {
      work_cv_.wait(lock, [&] { return ready() || trim_wanted_; });
    } else if (!work_cv_.wait_until(lock, last_activity_ + kQuietBeforeTrim,
                                    ready)) {
      if (Clock::now() < last_activity_ + kQuietBeforeTrim)
        continue;  // Not quiet yet.
      trim_wanted_ = false;
      lock.unlock();
      TrimHeap();
      lock.lock();
      continue;
    }
    if (!ready()) continue;
    if (work_ == nullptr) return;  // Stopped, with no turn under way.
    const std::function<void()>* work = std::exchange(work_, nullptr);
    lock.unlock();
    const std::int64_t start = ThreadCpuNs();
    (*work)();
    const std::int64_t used = ThreadCpuNs() - start;
    lock.lock();
    work_cpu_ns_ = used;
    work_done_ = true;
    trim_wanted_ = true;
    last_activity_ = Clock::now();
    work_cv_.notify_all();
  }
}

std::uint64_t InspectionBudget::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

std::uint64_t InspectionBudget::throttled_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return throttled_ns_;
}

}  // namespace mt::control
