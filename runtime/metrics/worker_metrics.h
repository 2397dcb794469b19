#ifndef MT_RUNTIME_METRICS_WORKER_METRICS_H_
#define MT_RUNTIME_METRICS_WORKER_METRICS_H_

#include <atomic>
#include <cstdint>

namespace mt::runtime::metrics {

// What a worker is doing between units, written only at transitions
// (never per unit). "Running a unit" is current_task_id != 0 on top of it.
enum class WorkerPhase : std::uint8_t {
  kStarting,   // Thread made, not in its loop yet.
  kActive,     // In its loop: running units or looking at its queues.
  kSearching,  // Out of local work, stealing from others.
  kParked,     // Asleep (possibly driving the reactor: see the parker).
  kExited,  // Retired (its thread may be dormant, kept for reuse) or stopped.
};

// What one worker publishes. Counters are written with relaxed atomics
// (almost all by the worker itself; "stolen_from" by the thieves) and read
// by anyone without a lock, so the admin API never stalls a worker. Aligned
// so two workers' counters never share a cache line.
struct alignas(64) WorkerMetrics {
  std::atomic<std::uint64_t> units_run{0};
  std::atomic<std::uint64_t> steals{0};        // Batches this worker stole.
  std::atomic<std::uint64_t> stolen_units{0};  // Units it got that way.
  std::atomic<std::uint64_t> stolen_from{0};   // Batches others took from it.
  std::atomic<std::uint64_t> parks{0};
  std::atomic<std::uint64_t> reactor_polls{0};
  std::atomic<std::uint64_t> overflows{0};  // Local queue spilled to injector.
  std::atomic<std::uint64_t> busy_ns{0};    // Busy periods that have ended.
  // Start of the busy period in progress (steady-clock ns; 0 while parked):
  // a worker that has not parked since it started still shows its time.
  std::atomic<std::int64_t> busy_since_ns{0};
  // The unit running now (0: none), written by the worker around each run.
  std::atomic<std::uint64_t> current_task_id{0};
  // That unit's domain (task::Task::domain), written before its id: what a
  // stand-in worker must leave alone while the unit holds this worker.
  std::atomic<std::uintptr_t> current_domain{0};
  // Since when it runs (steady-clock ns), estimated by the supervisor's
  // sampling (never by the worker: no clock read per unit); 0 if unknown.
  std::atomic<std::int64_t> current_since_ns{0};
  // The units_run value current_since_ns belongs to: it describes the unit
  // running now only while units_run still equals it.
  std::atomic<std::uint64_t> since_units_run{0};
  std::atomic<bool> lifo_occupied{false};
  std::atomic<WorkerPhase> phase{WorkerPhase::kStarting};
  std::atomic<std::int32_t> os_thread_id{0};  // Linux tid; 0 before start.
  // pthread_self() of the worker's thread: the ident Python keys its
  // threads by (sys._current_frames()), for a stall's stack.
  std::atomic<std::uint64_t> pthread_id{0};
};

// Adds to a counter only its owner thread writes: a plain load and store
// instead of a locked read-modify-write, which is most of the cost of
// counting on the hot path. Readers still see whole values.
inline void OwnerAdd(std::atomic<std::uint64_t>& counter, std::uint64_t n) {
  counter.store(counter.load(std::memory_order_relaxed) + n,
                std::memory_order_relaxed);
}

}  // namespace mt::runtime::metrics

#endif  // MT_RUNTIME_METRICS_WORKER_METRICS_H_
