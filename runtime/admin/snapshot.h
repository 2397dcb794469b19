#ifndef MT_RUNTIME_ADMIN_SNAPSHOT_H_
#define MT_RUNTIME_ADMIN_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/config.h"

namespace mt::runtime::admin {

enum class RuntimeState { kCreated, kRunning, kStopping, kStopped };

std::string_view RuntimeStateName(RuntimeState state);

struct WorkerSnapshot {
  std::size_t index = 0;
  std::uint64_t units_run = 0;
  std::uint64_t parks = 0;
  std::uint64_t busy_ns = 0;
};

// A consistent-enough copy of the runtime's state: every field is read
// without stopping a worker, so counters of different workers may be a few
// units apart.
struct RuntimeSnapshot {
  RuntimeState state = RuntimeState::kCreated;
  Config config;
  std::size_t worker_threads = 0;  // Resolved from config.
  std::size_t live_workers = 0;
  std::size_t injector_depth = 0;
  double uptime_seconds = 0;
  std::vector<WorkerSnapshot> workers;
};

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_SNAPSHOT_H_
