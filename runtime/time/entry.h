#ifndef MT_RUNTIME_TIME_ENTRY_H_
#define MT_RUNTIME_TIME_ENTRY_H_

#include <cstdint>

#include "runtime/task/task.h"

namespace mt::runtime::time {

class Wheel;
class TimerDriver;

// One pending timer. Owned by whoever armed it (a sleep, a call_later
// handle); it must be cancelled (or have fired) before it is destroyed.
// While armed it is linked into exactly one wheel slot, which is what makes
// cancellation O(1): unlink from a doubly-linked list.
class TimerEntry {
 public:
  TimerEntry() = default;
  TimerEntry(const TimerEntry&) = delete;
  TimerEntry& operator=(const TimerEntry&) = delete;

  // Deadline in wheel ticks (TimerDriver::kTickNs each, since the driver
  // started).
  std::uint64_t deadline_tick() const { return deadline_tick_; }

 private:
  friend class Wheel;
  friend class TimerDriver;

  std::uint64_t deadline_tick_ = 0;
  TimerEntry* prev_ = nullptr;
  TimerEntry* next_ = nullptr;
  std::int8_t level_ = -1;  // -1: not linked into the wheel.
  std::uint8_t slot_ = 0;
  // The unit woken when the timer fires. The entry holds one reference
  // while armed.
  task::Task* task_ = nullptr;
};

}  // namespace mt::runtime::time

#endif  // MT_RUNTIME_TIME_ENTRY_H_
