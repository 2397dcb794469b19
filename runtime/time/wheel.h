#ifndef MT_RUNTIME_TIME_WHEEL_H_
#define MT_RUNTIME_TIME_WHEEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/time/entry.h"

namespace mt::runtime::time {

// A hierarchical timing wheel: seven levels of 64 slots, so level L slots
// span 64^L ticks. An entry sits in the level given by the highest bit in
// which its deadline differs from "now", so insert and cancel are O(1);
// when time reaches a higher-level slot its entries cascade down a level
// until they land in level 0 and fire.
//
// The wheel reaches kHorizon ticks ahead (at TimerDriver's 100 us tick,
// about 13.7 years). A later deadline (up to "never", UINT64_MAX) is kept
// as it is but filed at the horizon; when time gets there the entry is
// filed again, so it fires at its own deadline and never early. The
// horizon is one top-level slot short of a whole turn of the top level:
// an entry filed there can never land in the slot "now" is in, which the
// wheel would take for a slot already due (it would fire such an entry at
// once, or re-file it in the same slot forever).
//
// Not thread-safe: TimerDriver guards it with a mutex.
class Wheel {
 public:
  static constexpr int kLevels = 7;
  static constexpr int kSlotBits = 6;
  static constexpr std::uint64_t kSlots = 1u << kSlotBits;
  static constexpr std::uint64_t kHorizon =
      (std::uint64_t{1} << (kSlotBits * kLevels)) -
      (std::uint64_t{1} << (kSlotBits * (kLevels - 1)));

  Wheel() = default;
  Wheel(const Wheel&) = delete;
  Wheel& operator=(const Wheel&) = delete;

  // Links `entry` for `deadline_tick`. Returns false (and links nothing)
  // when the deadline is not after the current tick: it is due now.
  bool Insert(TimerEntry* entry, std::uint64_t deadline_tick);
  // Unlinks an armed entry. O(1).
  void Remove(TimerEntry* entry);

  // The earliest tick at which some slot needs processing, or nullopt when
  // the wheel is empty. Never earlier than the earliest deadline's slot.
  std::optional<std::uint64_t> NextExpiration() const;

  // Advances to `now_tick`, appending every entry whose deadline is <= now
  // to `expired` (unlinked), cascading the rest.
  void Advance(std::uint64_t now_tick, std::vector<TimerEntry*>& expired);

  // Unlinks every entry (shutdown) into `out`.
  void DrainAll(std::vector<TimerEntry*>& out);

  std::uint64_t elapsed() const { return elapsed_; }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    TimerEntry* head = nullptr;
  };
  struct Level {
    std::uint64_t occupied = 0;  // Bit s set iff slots[s] is non-empty.
    std::array<Slot, kSlots> slots;
  };

  static int LevelFor(std::uint64_t elapsed, std::uint64_t deadline);
  // Files `entry` for its deadline, or at the horizon if that is later.
  void Link(TimerEntry* entry);
  // The tick at which `level`'s next occupied slot starts, if any.
  std::optional<std::uint64_t> NextExpirationAt(int level) const;
  void ProcessSlot(int level, std::uint64_t slot_start,
                   std::vector<TimerEntry*>& expired);

  std::uint64_t elapsed_ = 0;
  std::size_t size_ = 0;
  std::array<Level, kLevels> levels_;
};

}  // namespace mt::runtime::time

#endif  // MT_RUNTIME_TIME_WHEEL_H_
