#include "runtime/time/wheel.h"

#include <bit>

namespace mt::runtime::time {

int Wheel::LevelFor(std::uint64_t elapsed, std::uint64_t deadline) {
  // The highest differing bit picks the level; "| (kSlots - 1)" keeps
  // anything within the current 64-tick block on level 0.
  const std::uint64_t masked = (elapsed ^ deadline) | (kSlots - 1);
  const int significant = 63 - std::countl_zero(masked);
  const int level = significant / kSlotBits;
  return level < kLevels ? level : kLevels - 1;
}

bool Wheel::Insert(TimerEntry* entry, std::uint64_t deadline_tick) {
  if (deadline_tick <= elapsed_) return false;
  entry->deadline_tick_ = deadline_tick;
  Link(entry);
  ++size_;
  return true;
}

void Wheel::Link(TimerEntry* entry) {
  // Within the horizon the filing tick lies at most 63 top-level slots
  // ahead of now's, so the slot below is never now's own (see wheel.h).
  const std::uint64_t filed_at =
      entry->deadline_tick_ - elapsed_ > kHorizon ? elapsed_ + kHorizon
                                                  : entry->deadline_tick_;
  const int level = LevelFor(elapsed_, filed_at);
  const auto slot = static_cast<std::uint8_t>(
      (filed_at >> (level * kSlotBits)) & (kSlots - 1));
  Slot& s = levels_[level].slots[slot];
  entry->level_ = static_cast<std::int8_t>(level);
  entry->slot_ = slot;
  entry->prev_ = nullptr;
  entry->next_ = s.head;
  if (s.head != nullptr) s.head->prev_ = entry;
  s.head = entry;
  levels_[level].occupied |= std::uint64_t{1} << slot;
}

void Wheel::Remove(TimerEntry* entry) {
  if (entry->level_ < 0) return;
  Level& level = levels_[entry->level_];
  Slot& s = level.slots[entry->slot_];
  if (entry->prev_ != nullptr) {
    entry->prev_->next_ = entry->next_;
  } else {
    s.head = entry->next_;
  }
  if (entry->next_ != nullptr) entry->next_->prev_ = entry->prev_;
  if (s.head == nullptr) level.occupied &= ~(std::uint64_t{1} << entry->slot_);
  entry->prev_ = entry->next_ = nullptr;
  entry->level_ = -1;
  --size_;
}

std::optional<std::uint64_t> Wheel::NextExpirationAt(int level) const {
  const std::uint64_t occupied = levels_[level].occupied;
  if (occupied == 0) return std::nullopt;
  const int shift = level * kSlotBits;
  const std::uint64_t slot_range = std::uint64_t{1} << shift;
  const std::uint64_t level_range = slot_range << kSlotBits;
  const std::uint64_t now_slot = (elapsed_ >> shift) & (kSlots - 1);
  // First occupied slot at or after the current one, wrapping around.
  const std::uint64_t rotated = std::rotr(occupied, static_cast<int>(now_slot));
  const std::uint64_t slot =
      (now_slot + static_cast<std::uint64_t>(std::countr_zero(rotated))) &
      (kSlots - 1);
  const std::uint64_t level_start =
      level_range == 0 ? 0 : elapsed_ & ~(level_range - 1);
  std::uint64_t at = level_start + slot * slot_range;
  if (slot < now_slot) at += level_range;  // Next turn of this level.
  return at;
}

std::optional<std::uint64_t> Wheel::NextExpiration() const {
  // Entries on a lower level are due within the current slot of every
  // level above, so the lowest occupied level holds the earliest one.
  for (int level = 0; level < kLevels; ++level) {
    if (auto at = NextExpirationAt(level)) return at;
  }
  return std::nullopt;
}

void Wheel::ProcessSlot(int level, std::uint64_t slot_start,
                        std::vector<TimerEntry*>& expired) {
  const auto slot = static_cast<std::uint8_t>(
      (slot_start >> (level * kSlotBits)) & (kSlots - 1));
  Slot& s = levels_[level].slots[slot];
  TimerEntry* entry = s.head;
  s.head = nullptr;
  levels_[level].occupied &= ~(std::uint64_t{1} << slot);
  while (entry != nullptr) {
    TimerEntry* next = entry->next_;
    entry->prev_ = entry->next_ = nullptr;
    entry->level_ = -1;
    if (entry->deadline_tick_ <= elapsed_) {
      --size_;
      expired.push_back(entry);
    } else {
      // Still in the future: re-file it on a lower level (or, past the
      // horizon, at the new horizon).
      Link(entry);
    }
    entry = next;
  }
}

void Wheel::Advance(std::uint64_t now_tick, std::vector<TimerEntry*>& expired) {
  while (true) {
    int level = 0;
    std::optional<std::uint64_t> at;
    for (; level < kLevels; ++level) {
      at = NextExpirationAt(level);
      if (at) break;
    }
    if (!at || *at > now_tick) break;
    if (*at > elapsed_) elapsed_ = *at;
    ProcessSlot(level, *at, expired);
  }
  if (now_tick > elapsed_) elapsed_ = now_tick;
}

void Wheel::DrainAll(std::vector<TimerEntry*>& out) {
  for (int level = 0; level < kLevels; ++level) {
    for (Slot& s : levels_[level].slots) {
      for (TimerEntry* e = s.head; e != nullptr;) {
        TimerEntry* next = e->next_;
        e->prev_ = e->next_ = nullptr;
        e->level_ = -1;
        out.push_back(e);
        e = next;
      }
      s.head = nullptr;
    }
    levels_[level].occupied = 0;
  }
  size_ = 0;
}

}  // namespace mt::runtime::time
