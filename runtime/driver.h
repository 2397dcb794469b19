#ifndef MT_RUNTIME_DRIVER_H_
#define MT_RUNTIME_DRIVER_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "runtime/io/driver.h"
#include "runtime/time/timer_driver.h"

namespace mt::runtime {

// The reactor and the timers behind one blocking call. Whoever parks on the
// driver sleeps in epoll_wait until an fd is ready, the earliest timer is
// due, or Unpark writes the eventfd; then it dispatches both. One thread at
// a time drives it (the scheduler serialises that).
class Driver {
 public:
  using Clock = std::chrono::steady_clock;

  static absl::StatusOr<std::unique_ptr<Driver>> Create();

  // Sleeps at most `max_wait` (nullopt: until an event or timer). Returns
  // how many fd events and timers it dispatched.
  std::size_t Park(std::optional<Clock::duration> max_wait);
  // Wakes the thread in Park. Async-signal-safe.
  void Unpark() { io_->Wake(); }

  io::IoDriver& io() { return *io_; }
  time::TimerDriver& timers() { return timers_; }

  // Whether a turn of the reactor could report anything: timers are armed
  // or descriptors registered. Racy, for deciding whether to drive it.
  bool HasWork() { return timers_.pending() > 0 || io_->registered() > 0; }

  // Releases every registration and timer (and the task references they
  // hold). Call after the workers stopped.
  void Shutdown();

 private:
  explicit Driver(std::unique_ptr<io::IoDriver> io);

  std::unique_ptr<io::IoDriver> io_;
  time::TimerDriver timers_;
};

}  // namespace mt::runtime

#endif  // MT_RUNTIME_DRIVER_H_
