#ifndef MT_RUNTIME_ADMIN_SNAPSHOT_H_
#define MT_RUNTIME_ADMIN_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/blocking/stats.h"
#include "runtime/config.h"

namespace mt::runtime::admin {

// created → running → draining → cancelling → stopping → stopped.
enum class RuntimeState {
  kCreated,
  kRunning,
  kDraining,    // Servers told to stop accepting; in-flight work continues.
  kCancelling,  // Grace over: what is left is being cancelled.
  kStopping,    // Threads are being joined.
  kStopped,
};

std::string_view RuntimeStateName(RuntimeState state);

// What one worker is doing at the moment of the snapshot.
enum class WorkerState {
  kStarting,
  kRunning,         // Inside a unit (current_task_id says which).
  kIdle,            // In its loop between units.
  kSearching,       // Stealing from other workers.
  kParked,          // Asleep on its condition variable.
  kDrivingReactor,  // Asleep in epoll, dispatching I/O and timers.
  kRetiring,        // Resized away; handing its queue over.
  kExited,
};

std::string_view WorkerStateName(WorkerState state);

struct WorkerSnapshot {
  std::size_t index = 0;
  bool active = false;  // False for a slot whose worker has retired.
  WorkerState state = WorkerState::kStarting;
  std::int32_t os_thread_id = 0;
  std::uint64_t units_run = 0;
  std::uint64_t parks = 0;
  std::uint64_t busy_ns = 0;
  std::uint64_t steals = 0;        // Batches stolen by this worker.
  std::uint64_t stolen_units = 0;  // Units those batches held.
  std::uint64_t stolen_from = 0;   // Batches other workers took from it.
  std::uint64_t reactor_polls = 0;
  std::uint64_t overflows = 0;
  std::uint32_t local_queue_depth = 0;
  bool lifo_occupied = false;
  // The unit running now (0: idle) and for how long.
  std::uint64_t current_task_id = 0;
  std::uint64_t current_task_running_ns = 0;
  bool stalled = false;  // Running longer than the stall threshold.
};

// A consistent-enough copy of the runtime's state: every field is read
// without stopping a worker, so counters of different workers may be a few
// units apart.
struct RuntimeSnapshot {
  RuntimeState state = RuntimeState::kCreated;
  Config config;
  std::size_t worker_threads = 0;  // Target size of the worker pool.
  std::size_t live_workers = 0;
  std::size_t max_workers = 0;  // The most ResizeWorkers accepts.
  std::size_t searching_workers = 0;
  std::size_t parked_workers = 0;
  std::size_t injector_depth = 0;
  std::size_t tasks_in_flight = 0;
  std::size_t timers_pending = 0;
  std::size_t fds_registered = 0;
  std::uint64_t stalls_detected = 0;
  // Stand-in workers started while every worker was held, and the units
  // they ran (Scheduler::StartStandIn).
  std::uint64_t stand_ins_started = 0;
  std::uint64_t stand_in_units_run = 0;
  std::uint64_t dedicated_reactor_polls = 0;
  double uptime_seconds = 0;
  blocking::BlockingPoolStats blocking;
  std::vector<WorkerSnapshot> workers;
};

// One report of the stall detector.
struct StallReport {
  std::size_t worker_index = 0;
  std::uint64_t task_id = 0;
  std::uint64_t running_ns = 0;
  // The worker's units_run while the unit held it: the stall still goes on
  // while the worker's counter reads the same.
  std::uint64_t units_run = 0;
  std::uint64_t thread_ident = 0;  // The worker thread's pthread_self().
  std::int32_t os_thread_id = 0;   // Its Linux tid.
};

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_SNAPSHOT_H_
