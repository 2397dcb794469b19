#ifndef MT_RUNTIME_SCHEDULER_LOCAL_QUEUE_H_
#define MT_RUNTIME_SCHEDULER_LOCAL_QUEUE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/task/task.h"

namespace mt::runtime::scheduler {

// A worker's own run queue: a bounded ring that only its owner pushes to
// and pops from (FIFO), while other workers steal half of it at a time.
//
// The head is one 64-bit word holding two 32-bit positions, "steal" and
// "real". Outside a steal they are equal. A stealer first claims a batch by
// moving only "real" forward, copies the claimed slots, then moves "steal"
// up to "real". Slots in [steal, real) are being copied, so the owner counts
// them as occupied; a second stealer that sees steal != real backs off. All
// positions wrap modulo 2^32; the ring size divides that.
class LocalQueue {
 public:
  static constexpr std::uint32_t kCapacity = 256;

  LocalQueue();

  // Owner only. Returns false when the ring is full; the caller then moves
  // half of it out with TakeHalfForOverflow.
  bool TryPush(task::Task* task);
  // Owner only. FIFO.
  task::Task* Pop();
  // Owner only, when TryPush failed: claims the older half of the ring and
  // appends those tasks to `out`. Returns false if a stealer is active (the
  // ring is then draining anyway; the caller sends just its one task away).
  bool TakeHalfForOverflow(std::vector<task::Task*>& out);

  // Any other worker: moves about half of this queue into `dst` (which must
  // be the caller's own, empty or nearly so) and returns one stolen task to
  // run now, or nullptr if there was nothing to steal or another stealer
  // was active. `stolen` receives how many tasks moved in total.
  task::Task* StealInto(LocalQueue& dst, std::uint32_t& stolen);

  // Racy snapshot for metrics and for "is there work anywhere" checks.
  std::uint32_t Len() const;
  bool IsEmpty() const { return Len() == 0; }
  // Free room as seen by the owner.
  std::uint32_t RemainingSlots() const;

 private:
  static constexpr std::uint32_t kMask = kCapacity - 1;
  static std::uint64_t Pack(std::uint32_t steal, std::uint32_t real) {
    return (std::uint64_t{steal} << 32) | real;
  }
  static std::uint32_t Steal(std::uint64_t head) {
    return static_cast<std::uint32_t>(head >> 32);
  }
  static std::uint32_t Real(std::uint64_t head) {
    return static_cast<std::uint32_t>(head);
  }

  alignas(64) std::atomic<std::uint64_t> head_{0};
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  alignas(64) std::array<std::atomic<task::Task*>, kCapacity> slots_;
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_LOCAL_QUEUE_H_
