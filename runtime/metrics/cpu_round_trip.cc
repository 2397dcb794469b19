#include "runtime/metrics/cpu_round_trip.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace mt::runtime::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// The line the two threads hand back and forth, alone in its cache line
// (and the next, which adjacent-line prefetchers pull in with it).
struct alignas(128) Line {
  std::atomic<std::int64_t> value{0};
};

bool PinTo(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Spins until `line` holds `expected` or the run is abandoned; reads the
// clock only once in a while, so the spin itself is what is timed.
bool WaitFor(const Line& line, std::int64_t expected,
             const std::atomic<bool>& abandoned, Clock::time_point deadline) {
  for (std::uint32_t spins = 1;; ++spins) {
    if (line.value.load(std::memory_order_acquire) == expected) return true;
    if ((spins & 0xfff) == 0 && (abandoned.load(std::memory_order_relaxed) ||
                                 Clock::now() > deadline)) {
      return false;
    }
  }
}

}  // namespace

std::optional<double> CacheLineRoundTripNs(int cpu_a, int cpu_b, int rounds,
                                           int samples,
                                           std::chrono::milliseconds budget) {
  if (cpu_a == cpu_b || rounds <= 0 || samples <= 0) return std::nullopt;
  const Clock::time_point deadline = Clock::now() + budget;
  const std::int64_t total = static_cast<std::int64_t>(rounds) * samples;
  Line line;
  std::atomic<bool> abandoned{false};
  std::atomic<int> pinned{0};  // Threads pinned; -1 once one could not be.

  // The answering side: waits for each odd value and answers with the
  // next even one.
  std::thread answerer([&] {
    if (!PinTo(cpu_b)) {
      pinned.store(-1, std::memory_order_release);
      return;
    }
    pinned.fetch_add(1, std::memory_order_acq_rel);
    for (std::int64_t i = 0; i < total; ++i) {
      if (!WaitFor(line, 2 * i + 1, abandoned, deadline)) return;
      line.value.store(2 * i + 2, std::memory_order_release);
    }
  });

  std::vector<double> per_round;  // Complete only if every sample ran.
  std::thread asker([&] {
    if (!PinTo(cpu_a)) {
      abandoned.store(true, std::memory_order_relaxed);
      return;
    }
    // Both threads are on their CPUs before anything is timed.
    while (pinned.load(std::memory_order_acquire) == 0) {
      if (Clock::now() > deadline) {
        abandoned.store(true, std::memory_order_relaxed);
        return;
      }
      std::this_thread::yield();
    }
    if (pinned.load(std::memory_order_acquire) < 0) return;
    std::int64_t i = 0;
    for (int s = 0; s < samples; ++s) {
      const Clock::time_point start = Clock::now();
      for (int r = 0; r < rounds; ++r, ++i) {
        line.value.store(2 * i + 1, std::memory_order_release);
        if (!WaitFor(line, 2 * i + 2, abandoned, deadline)) {
          abandoned.store(true, std::memory_order_relaxed);
          return;
        }
      }
      const std::chrono::duration<double, std::nano> took =
          Clock::now() - start;
      per_round.push_back(took.count() / rounds);
    }
  });
  asker.join();
  abandoned.store(true, std::memory_order_relaxed);
  answerer.join();
  if (per_round.size() != static_cast<std::size_t>(samples)) {
    return std::nullopt;
  }
  std::nth_element(per_round.begin(), per_round.begin() + per_round.size() / 2,
                   per_round.end());
  return per_round[per_round.size() / 2];
}

}  // namespace mt::runtime::metrics
