#ifndef MT_RUNTIME_METRICS_CYCLE_CLOCK_H_
#define MT_RUNTIME_METRICS_CYCLE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace mt::runtime::metrics {

// A clock cheap enough to read around every task step: the CPU's time-
// stamp counter where there is one (a few nanoseconds, against tens for
// steady_clock::now()), converted to nanoseconds only when someone asks,
// with a rate measured against steady_clock over the time since the first
// reading. Elsewhere it is steady_clock in nanoseconds. For durations and
// ages shown to operators, not for anything that must never be wrong.
class CycleClock {
 public:
  static std::uint64_t Now() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count());
#endif
  }

  // Nanoseconds in `cycles` (a difference of two Now() readings).
  static double ToNs(std::uint64_t cycles) { return cycles * NsPerCycle(); }

  // ToNs for the path of every task step (the step histograms): a
  // multiply by the last rate ToNs measured, or by Anchor()'s short
  // calibration before that.
  static std::uint64_t ToNsFast(std::uint64_t cycles) {
    return static_cast<std::uint64_t>(
        static_cast<double>(cycles) *
        fast_ns_per_cycle_.load(std::memory_order_relaxed));
  }

  // Call once early (the runtime's start) so the rate is measured over a
  // long span; later calls do nothing.
  static void Anchor() {
    static const bool calibrated = [] {
      (void)Origin();
      Calibrate();
      return true;
    }();
    (void)calibrated;
  }

 private:
  struct Reading {
    std::uint64_t cycles;
    std::chrono::steady_clock::time_point time;
  };
  static const Reading& Origin() {
    static const Reading origin{Now(), std::chrono::steady_clock::now()};
    return origin;
  }
  static double NsPerCycle() {
#if defined(__x86_64__)
    const Reading& origin = Origin();
    const std::uint64_t cycles = Now() - origin.cycles;
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - origin.time)
                          .count();
    // Too short a span to measure: the calibration's rate until then.
    if (cycles < 1'000'000 || ns <= 0)
      return fast_ns_per_cycle_.load(std::memory_order_relaxed);
    const double rate = ns / static_cast<double>(cycles);
    fast_ns_per_cycle_.store(rate, std::memory_order_relaxed);
    return rate;
#else
    return 1.0;
#endif
  }

  // The rate over one millisecond of spinning: within a fraction of a
  // percent, which is plenty for power-of-two buckets.
  static void Calibrate() {
#if defined(__x86_64__)
    const auto start_time = std::chrono::steady_clock::now();
    const std::uint64_t start = Now();
    auto now = start_time;
    while (now - start_time < std::chrono::milliseconds(1))
      now = std::chrono::steady_clock::now();
    const std::uint64_t cycles = Now() - start;
    const double ns =
        std::chrono::duration<double, std::nano>(now - start_time).count();
    if (cycles > 0) fast_ns_per_cycle_.store(ns / static_cast<double>(cycles));
#endif
  }

  // Assume a 3 GHz counter until a rate is measured.
  static inline std::atomic<double> fast_ns_per_cycle_ {
#if defined(__x86_64__)
    1.0 / 3.0
#else
    1.0
#endif
  };
};

}  // namespace mt::runtime::metrics

#endif  // MT_RUNTIME_METRICS_CYCLE_CLOCK_H_
