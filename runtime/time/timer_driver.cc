#include "runtime/time/timer_driver.h"

#include <limits>
#include <utility>

namespace mt::runtime::time {

using std::chrono::nanoseconds;

TimerDriver::TimerDriver(std::function<void()> unpark_driver)
    // Tick 0 is "not sleeping", so time starts at tick 1.
    : start_(Clock::now() - nanoseconds(kTickNs)),
      unpark_driver_(std::move(unpark_driver)) {}

TimerDriver::~TimerDriver() { Shutdown(); }

std::uint64_t TimerDriver::TickCeil(Clock::time_point t) const {
  if (t <= start_) return 0;
  // The clock's latest time point means "never" (a deadline of inf).
  if (t == Clock::time_point::max()) return std::numeric_limits<std::uint64_t>::max();
  const auto ns = std::chrono::duration_cast<nanoseconds>(t - start_).count();
  // Not (ns + kTickNs - 1) / kTickNs: near the clock's end that overflows.
  return static_cast<std::uint64_t>(ns / kTickNs + (ns % kTickNs != 0 ? 1 : 0));
}

std::uint64_t TimerDriver::TickFloor(Clock::time_point t) const {
  if (t <= start_) return 0;
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<nanoseconds>(t - start_).count() / kTickNs);
}

void TimerDriver::Arm(TimerEntry* entry, Clock::time_point deadline,
                      task::Task* task) {
  // Rounding up means a timer never fires before its deadline.
  const std::uint64_t tick = TickCeil(deadline);
  bool wake_driver = false;
  bool due_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) {
      // Nobody processes the wheel any more: an entry armed now would keep
      // its task (and whatever that holds) alive forever. Wake it instead;
      // a stopped scheduler cancels it.
      due_now = true;
    } else if (wheel_.Insert(entry, tick)) {
      task->Ref();
      entry->task_ = task;
      pending_.fetch_add(1, std::memory_order_relaxed);
      const std::uint64_t sleeping = sleeping_until_.load(std::memory_order_relaxed);
      wake_driver = sleeping != kNotSleeping && tick < sleeping;
      if (wake_driver) sleeping_until_.store(tick, std::memory_order_relaxed);
    } else {
      due_now = true;
    }
  }
  if (due_now) task->Wake(task::ScheduleKind::kWake);
  if (wake_driver) unpark_driver_();
}

bool TimerDriver::Cancel(TimerEntry* entry) {
  task::Task* task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entry->task_ == nullptr) return false;
    wheel_.Remove(entry);
    task = entry->task_;
    entry->task_ = nullptr;
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  task->Unref();
  return true;
}

std::optional<TimerDriver::Clock::duration> TimerDriver::PrepareToSleep(
    Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<std::uint64_t> next = wheel_.NextExpiration();
  if (!next) {
    sleeping_until_.store(std::numeric_limits<std::uint64_t>::max(),
                          std::memory_order_relaxed);
    return std::nullopt;
  }
  sleeping_until_.store(*next, std::memory_order_relaxed);
  const Clock::time_point at =
      start_ + std::chrono::duration_cast<Clock::duration>(nanoseconds(*next * kTickNs));
  return at > now ? at - now : Clock::duration::zero();
}

void TimerDriver::AwakeFromSleep() {
  std::lock_guard<std::mutex> lock(mu_);
  sleeping_until_.store(kNotSleeping, std::memory_order_relaxed);
}

std::size_t TimerDriver::ProcessExpired(Clock::time_point now) {
  std::vector<task::Task*> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    expired_.clear();
    wheel_.Advance(TickFloor(now), expired_);
    due.reserve(expired_.size());
    for (TimerEntry* e : expired_) {
      due.push_back(e->task_);
      e->task_ = nullptr;  // From here on Cancel reports "already fired".
    }
    pending_.fetch_sub(due.size(), std::memory_order_relaxed);
  }
  // Entries are not touched past the lock: their owners may free them as
  // soon as Cancel reports them fired.
  for (task::Task* t : due) {
    t->Wake(task::ScheduleKind::kIo);
    t->Unref();
  }
  return due.size();
}

void TimerDriver::Shutdown() {
  std::vector<TimerEntry*> all;
  std::vector<task::Task*> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    wheel_.DrainAll(all);
    for (TimerEntry* e : all) {
      tasks.push_back(e->task_);
      e->task_ = nullptr;
    }
    pending_.store(0, std::memory_order_relaxed);
  }
  for (task::Task* t : tasks) t->Unref();
}

}  // namespace mt::runtime::time
