#include "runtime/metrics/histogram.h"

#include <bit>
#include <mutex>
#include <vector>

#include "runtime/metrics/worker_metrics.h"  // OwnerAdd

namespace mt::runtime::metrics {
namespace {

// Slots given back by threads that ended, and the next never used.
std::mutex slots_mu;
std::vector<int> free_slots;
int next_slot = 0;

// Holds a thread's slot and gives it back when the thread ends. The mutex
// hands the shard's counts over: the next owner sees every store the last
// one made before it continues the plain load-and-store adds.
struct SlotLease {
  int slot;
  SlotLease() {
    std::lock_guard<std::mutex> lock(slots_mu);
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else if (next_slot < kThreadSlots) {
      slot = next_slot++;
    } else {
      slot = kThreadSlots;
    }
  }
  ~SlotLease() {
    if (slot == kThreadSlots) return;
    std::lock_guard<std::mutex> lock(slots_mu);
    free_slots.push_back(slot);
  }
};

int BucketOf(std::uint64_t ns) {
  if (ns <= DurationHistogram::UpperBoundNs(0)) return 0;
  // The smallest i with ns <= 2^(first + i).
  const int log2_ceil = std::bit_width(ns - 1);
  const int i = log2_ceil - DurationHistogram::kFirstBoundLog2;
  return i < DurationHistogram::kFiniteBuckets
             ? i
             : DurationHistogram::kFiniteBuckets;
}

}  // namespace

int ThreadSlot() {
  thread_local SlotLease lease;
  return lease.slot;
}

void DurationHistogram::RecordFor(int slot, std::uint64_t ns) {
  Shard& shard = shards_[slot];
  const int bucket = BucketOf(ns);
  if (slot < kThreadSlots) {
    OwnerAdd(shard.counts[bucket], 1);
    OwnerAdd(shard.sum_ns, ns);
  } else {
    shard.counts[bucket].fetch_add(1, std::memory_order_relaxed);
    shard.sum_ns.fetch_add(ns, std::memory_order_relaxed);
  }
}

DurationHistogram::Totals DurationHistogram::Read() const {
  Totals totals;
  for (const Shard& shard : shards_) {
    for (int i = 0; i < kBuckets; ++i) {
      const std::uint64_t n = shard.counts[i].load(std::memory_order_relaxed);
      totals.counts[i] += n;
      totals.count += n;
    }
    totals.sum_ns += shard.sum_ns.load(std::memory_order_relaxed);
  }
  return totals;
}

namespace {

// Constant-initialized: no guard on the path of every step.
DurationHistogram task_step_durations;
DurationHistogram task_schedule_delays;

}  // namespace

DurationHistogram& TaskStepDurations() { return task_step_durations; }

DurationHistogram& TaskScheduleDelays() { return task_schedule_delays; }

void RecordTaskStep(std::uint64_t delay_ns, std::uint64_t step_ns) {
  const int slot = ThreadSlot();
  task_schedule_delays.RecordFor(slot, delay_ns);
  task_step_durations.RecordFor(slot, step_ns);
}

}  // namespace mt::runtime::metrics
