#include "runtime/metrics/cpu_round_trip.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <vector>

namespace mt::runtime::metrics {
namespace {

using std::chrono::milliseconds;

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

TEST(CacheLineRoundTripTest, MeasuresBetweenTwoAllowedCpus) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2)
    GTEST_SKIP() << "needs two CPUs, this process may use " << cpus.size();
  const std::optional<double> ns =
      CacheLineRoundTripNs(cpus[0], cpus[1], 2000, 5, milliseconds(20000));
  ASSERT_TRUE(ns.has_value());
  // A hand-off and its answer: at least a few nanoseconds, and well under
  // the time slices a preempted thread would add (sanitizers included).
  EXPECT_GT(*ns, 1.0);
  EXPECT_LT(*ns, 1e6);
}

TEST(CacheLineRoundTripTest, OneCpuWithItselfHasNoRoundTrip) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_FALSE(
      CacheLineRoundTripNs(cpus[0], cpus[0], 100, 1, milliseconds(1000))
          .has_value());
}

TEST(CacheLineRoundTripTest, ACpuThisProcessMayNotUseGivesNothing) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_FALSE(CacheLineRoundTripNs(cpus[0], -1, 100, 1, milliseconds(1000))
                   .has_value());
  EXPECT_FALSE(CacheLineRoundTripNs(-1, cpus[0], 100, 1, milliseconds(1000))
                   .has_value());
  EXPECT_FALSE(
      CacheLineRoundTripNs(cpus[0], CPU_SETSIZE, 100, 1, milliseconds(1000))
          .has_value());
}

TEST(CacheLineRoundTripTest, GivesUpWhenTheBudgetRunsOut) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  // Far more hand-offs than a millisecond holds: abandoned, not hung.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(
      CacheLineRoundTripNs(cpus[0], cpus[1], 100'000'000, 1, milliseconds(1))
          .has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace mt::runtime::metrics
