#include "runtime/driver.h"

#include <utility>

namespace mt::runtime {

absl::StatusOr<std::unique_ptr<Driver>> Driver::Create() {
  absl::StatusOr<std::unique_ptr<io::IoDriver>> io = io::IoDriver::Create();
  if (!io.ok()) return io.status();
  return std::unique_ptr<Driver>(new Driver(std::move(*io)));
}

// The timer driver wakes the reactor through the eventfd when a new
// deadline is earlier than the one it sleeps towards.
Driver::Driver(std::unique_ptr<io::IoDriver> io)
    : io_(std::move(io)), timers_([io = io_.get()] { io->Wake(); }) {}

std::size_t Driver::Park(std::optional<Clock::duration> max_wait) {
  Clock::time_point now = Clock::now();
  std::optional<Clock::duration> wait = timers_.PrepareToSleep(now);
  if (max_wait && (!wait || *max_wait < *wait)) wait = max_wait;
  std::optional<std::chrono::nanoseconds> timeout;
  if (wait) timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(*wait);
  std::size_t dispatched = io_->TurnFor(timeout);
  timers_.AwakeFromSleep();
  dispatched += timers_.ProcessExpired(Clock::now());
  return dispatched;
}

void Driver::Shutdown() { timers_.Shutdown(); }

}  // namespace mt::runtime
