#ifndef MT_RUNTIME_METRICS_CPU_ROUND_TRIP_H_
#define MT_RUNTIME_METRICS_CPU_ROUND_TRIP_H_

#include <chrono>
#include <optional>

namespace mt::runtime::metrics {

// How long one cache line takes to travel from one CPU to another and
// back, in nanoseconds: the median of `samples` timings of `rounds`
// hand-offs between two threads pinned to `cpu_a` and `cpu_b`.
//
// What every cross-worker wake, steal and reference-count hand-over pays.
// On a VM it is the host's placement of the virtual CPUs, which can change
// under a running guest: two vCPUs on one physical core or socket answer in
// tens of nanoseconds, on different sockets in hundreds, and a workload
// whose workers talk all the time (an in-process echo) runs up to half as
// fast again in the second case. A benchmark records it beside the
// hypervisor's steal time.
//
// Returns nullopt when the two threads cannot be pinned there (a CPU this
// process may not use, or cpu_a == cpu_b), or when the hand-offs do not
// finish within `budget` (a CPU busy with something else).
std::optional<double> CacheLineRoundTripNs(int cpu_a, int cpu_b, int rounds,
                                           int samples,
                                           std::chrono::milliseconds budget);

}  // namespace mt::runtime::metrics

#endif  // MT_RUNTIME_METRICS_CPU_ROUND_TRIP_H_
