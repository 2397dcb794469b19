#ifndef MT_RUNTIME_METRICS_HISTOGRAM_H_
#define MT_RUNTIME_METRICS_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace mt::runtime::metrics {

// The calling thread's slot in [0, kThreadSlots), taken on first use and
// given back when the thread ends (the next thread continues its counts),
// or kThreadSlots when every slot is taken: a shared one.
inline constexpr int kThreadSlots = 64;
int ThreadSlot();

// A histogram of durations that is always on: recording is two relaxed
// loads and stores on a shard only the calling thread writes, so it can sit
// on the path of every task step. Buckets are powers of two of nanoseconds
// (256 ns up to 2^34 ns, about 17 s, then +Inf), the shape of Go's runtime
// histograms: fixed bounds, so a scraper sees the same series every time,
// and a relative error of at most 2x per bucket across eight decades.
//
// Memory is fixed: one shard per thread slot (ThreadSlot above), and one
// shared shard that the threads beyond them add to atomically.
// Counts are cumulative for the life of the process.
class DurationHistogram {
 public:
  static constexpr int kFirstBoundLog2 = 8;            // 256 ns.
  static constexpr int kFiniteBuckets = 27;            // Up to 2^34 ns.
  static constexpr int kBuckets = kFiniteBuckets + 1;  // And +Inf.

  // The upper bound (inclusive) of bucket `i` < kFiniteBuckets, in ns.
  static constexpr std::uint64_t UpperBoundNs(int i) {
    return std::uint64_t{1} << (kFirstBoundLog2 + i);
  }

  struct Totals {
    std::array<std::uint64_t, kBuckets>
        counts{};  // Per bucket, not cumulative.
    std::uint64_t count = 0;
    std::uint64_t sum_ns = 0;
  };

  // Adds one observation of `ns`. Any thread.
  void Record(std::uint64_t ns) { RecordFor(ThreadSlot(), ns); }
  // Record() for a caller that has its ThreadSlot() at hand.
  void RecordFor(int slot, std::uint64_t ns);
  // Sums every shard. Any thread; `count` is the sum of `counts`, and a
  // Record racing the read may be in them and not yet in `sum_ns`.
  Totals Read() const;

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<std::uint64_t>, kBuckets> counts{};
    std::atomic<std::uint64_t> sum_ns{0};
  };
  std::array<Shard, kThreadSlots + 1> shards_{};  // The last one is shared.
};

// The process's histograms of Python task steps, recorded by the loop's
// task unit (pyext) and exported by mt_asyncio.metrics. How long each
// step of a task ran:
DurationHistogram& TaskStepDurations();
// From the wake that queued a task to the start of the step it woke.
DurationHistogram& TaskScheduleDelays();
// One task step into both: its scheduling delay and its duration.
void RecordTaskStep(std::uint64_t delay_ns, std::uint64_t step_ns);

}  // namespace mt::runtime::metrics

#endif  // MT_RUNTIME_METRICS_HISTOGRAM_H_
