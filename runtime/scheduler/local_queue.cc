#include "runtime/scheduler/local_queue.h"

namespace mt::runtime::scheduler {

LocalQueue::LocalQueue() {
  for (auto& slot : slots_) slot.store(nullptr, std::memory_order_relaxed);
}

bool LocalQueue::TryPush(task::Task* task) {
  const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
  // Acquire pairs with a stealer's release when it finishes copying, so
  // slots it read are free to overwrite.
  const std::uint32_t steal = Steal(head_.load(std::memory_order_acquire));
  if (tail - steal >= kCapacity) return false;
  slots_[tail & kMask].store(task, std::memory_order_relaxed);
  tail_.store(tail + 1, std::memory_order_release);
  return true;
}

task::Task* LocalQueue::Pop() {
  std::uint64_t head = head_.load(std::memory_order_acquire);
  for (;;) {
    const std::uint32_t steal = Steal(head);
    const std::uint32_t real = Real(head);
    // Only the owner moves the tail, so a relaxed load sees its own pushes.
    if (real == tail_.load(std::memory_order_relaxed)) return nullptr;
    const std::uint32_t next_real = real + 1;
    const std::uint64_t next =
        steal == real ? Pack(next_real, next_real) : Pack(steal, next_real);
    if (head_.compare_exchange_weak(head, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return slots_[real & kMask].load(std::memory_order_relaxed);
    }
  }
}

bool LocalQueue::TakeHalfForOverflow(std::vector<task::Task*>& out) {
  constexpr std::uint32_t kHalf = kCapacity / 2;
  std::uint64_t head = head_.load(std::memory_order_acquire);
  const std::uint32_t steal = Steal(head);
  const std::uint32_t real = Real(head);
  if (steal != real) return false;
  const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
  if (tail - real < kHalf) return false;  // Not full after all.
  const std::uint64_t next = Pack(real + kHalf, real + kHalf);
  if (!head_.compare_exchange_strong(head, next, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
    return false;  // A stealer got in first and is making room.
  }
  for (std::uint32_t i = 0; i < kHalf; ++i) {
    out.push_back(slots_[(real + i) & kMask].load(std::memory_order_relaxed));
  }
  return true;
}

task::Task* LocalQueue::StealInto(LocalQueue& dst, std::uint32_t& stolen) {
  stolen = 0;
  const std::uint32_t dst_tail = dst.tail_.load(std::memory_order_relaxed);
  const std::uint32_t dst_steal =
      Steal(dst.head_.load(std::memory_order_acquire));
  // Never fill our own queue past half: the owner (us) must keep room.
  if (dst_tail - dst_steal > kCapacity / 2) return nullptr;

  // 1. Claim a batch by moving only "real".
  std::uint64_t head = head_.load(std::memory_order_acquire);
  std::uint32_t first;
  std::uint32_t n;
  for (;;) {
    const std::uint32_t steal = Steal(head);
    const std::uint32_t real = Real(head);
    if (steal != real) return nullptr;  // Another stealer is active.
    const std::uint32_t tail = tail_.load(std::memory_order_acquire);
    n = tail - real;
    n -= n / 2;
    if (n == 0) return nullptr;
    if (n > kCapacity / 2) n = kCapacity / 2;
    if (head_.compare_exchange_weak(head, Pack(steal, real + n),
                                    std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      first = real;
      break;
    }
  }

  // 2. Copy the claimed slots; the owner will not reuse them until step 3.
  for (std::uint32_t i = 0; i < n; ++i) {
    task::Task* t = slots_[(first + i) & kMask].load(std::memory_order_relaxed);
    dst.slots_[(dst_tail + i) & kMask].store(t, std::memory_order_relaxed);
  }

  // 3. Release the claim: "steal" catches up with "real" (which the owner
  // may have advanced meanwhile by popping).
  head = head_.load(std::memory_order_acquire);
  for (;;) {
    const std::uint32_t real = Real(head);
    if (head_.compare_exchange_weak(head, Pack(real, real),
                                    std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      break;
    }
  }

  // 4. Run the last stolen task now; publish the rest in our queue.
  stolen = n;
  const std::uint32_t last = dst_tail + n - 1;
  task::Task* run_now = dst.slots_[last & kMask].load(std::memory_order_relaxed);
  if (n > 1) dst.tail_.store(last, std::memory_order_release);
  return run_now;
}

std::uint32_t LocalQueue::Len() const {
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  const std::uint32_t tail = tail_.load(std::memory_order_acquire);
  const std::uint32_t len = tail - Real(head);
  return len > kCapacity ? 0 : len;  // A torn pair of reads; report empty.
}

std::uint32_t LocalQueue::RemainingSlots() const {
  const std::uint32_t steal = Steal(head_.load(std::memory_order_acquire));
  const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
  return kCapacity - (tail - steal);
}

}  // namespace mt::runtime::scheduler
