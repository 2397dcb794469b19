#ifndef MT_RUNTIME_TIME_TIMER_DRIVER_H_
#define MT_RUNTIME_TIME_TIMER_DRIVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/task/task.h"
#include "runtime/time/entry.h"
#include "runtime/time/wheel.h"

namespace mt::runtime::time {

// The thread-safe face of the wheel. Any thread arms and cancels timers;
// whichever thread drives the reactor asks how long it may sleep and
// processes what expired.
//
// The driver is woken (through `unpark_driver`) only when a new deadline is
// earlier than the one it is sleeping towards; a timer armed while nobody
// sleeps wakes nobody, because the driver recomputes before it sleeps.
class TimerDriver {
 public:
  using Clock = std::chrono::steady_clock;
  // One wheel tick. Deadlines round up to a tick, so this bounds how late
  // a timer fires (plus the reactor's own wakeup latency): at 1 ms a
  // sleep(0.001) took about 2 ms, twice stdlib's.
  static constexpr std::int64_t kTickNs = 100'000;

  explicit TimerDriver(std::function<void()> unpark_driver);
  ~TimerDriver();
  TimerDriver(const TimerDriver&) = delete;
  TimerDriver& operator=(const TimerDriver&) = delete;

  // Arms `entry` (which must not be armed) to wake `task` at `deadline`;
  // takes a reference on `task`. A deadline already due wakes it now.
  void Arm(TimerEntry* entry, Clock::time_point deadline, task::Task* task);
  // O(1). Returns true if the timer was armed and has now been disarmed;
  // false if it already fired (or was never armed).
  bool Cancel(TimerEntry* entry);

  // Driver side. How long the driver may sleep (nullopt: no timers) and
  // records that it is about to sleep that long.
  std::optional<Clock::duration> PrepareToSleep(Clock::time_point now);
  // The driver is awake again: new timers need not wake it.
  void AwakeFromSleep();
  // Wakes every task whose deadline is <= now; returns how many.
  std::size_t ProcessExpired(Clock::time_point now);

  // Disarms everything and drops the references the entries held; a later
  // Arm wakes its task at once instead of holding it.
  void Shutdown();

  std::size_t pending() const { return pending_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::uint64_t kNotSleeping = 0;
  std::uint64_t TickCeil(Clock::time_point t) const;
  std::uint64_t TickFloor(Clock::time_point t) const;

  const Clock::time_point start_;
  const std::function<void()> unpark_driver_;
  mutable std::mutex mu_;
  Wheel wheel_;                           // Guarded by mu_.
  bool shut_down_ = false;                // Guarded by mu_; Arm then arms nothing.
  std::vector<TimerEntry*> expired_;      // Guarded by mu_; scratch.
  std::atomic<std::uint64_t> sleeping_until_{kNotSleeping};
  std::atomic<std::size_t> pending_{0};
};

}  // namespace mt::runtime::time

#endif  // MT_RUNTIME_TIME_TIMER_DRIVER_H_
