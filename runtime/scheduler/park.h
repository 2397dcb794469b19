#ifndef MT_RUNTIME_SCHEDULER_PARK_H_
#define MT_RUNTIME_SCHEDULER_PARK_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "runtime/driver.h"

namespace mt::runtime::scheduler {

// The driver shared by the workers: whichever parking worker gets the lock
// first sleeps in the reactor; the rest sleep on their condition variables.
struct SharedDriver {
  Driver* driver = nullptr;
  // False when a dedicated thread drives the reactor (Config::reactor).
  bool workers_drive = true;
  std::mutex lock;
};

// How one worker sleeps. Unpark before Park makes the next Park return at
// once, so a wake racing with a worker on its way to sleep is never lost.
class Parker {
 public:
  explicit Parker(SharedDriver* shared) : shared_(shared) {}

  // Returns true if this park drove the reactor (a "reactor poll").
  // `timeout` bounds the sleep (nullopt: until unparked).
  bool Park(std::optional<std::chrono::nanoseconds> timeout);
  // From any thread.
  void Unpark();
  // Polls the reactor without sleeping if nobody else is driving it. Used
  // by busy workers so I/O and timers progress when nobody parks.
  bool PollDriver();
  // Whether this parker's thread is asleep in the reactor right now
  // (a racy read for the admin view).
  bool driving() const { return driving_.load(std::memory_order_relaxed); }

 private:
  enum class State { kEmpty, kParkedCondvar, kParkedDriver, kNotified };

  SharedDriver* const shared_;
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kEmpty;  // Guarded by mu_.
  std::atomic<bool> driving_{false};  // Mirrors kParkedDriver for readers.
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_PARK_H_
