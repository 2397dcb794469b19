#ifndef MT_PYEXT_SRC_COMMON_CURRENT_TASK_H_
#define MT_PYEXT_SRC_COMMON_CURRENT_TASK_H_

#include <atomic>
#include <cstdint>

namespace mt::pyext {

// The id (the control plane's task id) of the task this thread steps now,
// for packages below the loop (sync: a Lock records its owner for the
// diagnostics) that must not include it. The loop package installs the
// source at module init; 0 when nothing is installed or no task steps.
using CurrentTaskIdFn = std::uint64_t (*)();

inline std::atomic<CurrentTaskIdFn> current_task_id_source{nullptr};

inline void SetCurrentTaskIdSource(CurrentTaskIdFn fn) {
  current_task_id_source.store(fn, std::memory_order_release);
}

inline std::uint64_t CurrentTaskId() {
  const CurrentTaskIdFn fn =
      current_task_id_source.load(std::memory_order_acquire);
  return fn != nullptr ? fn() : 0;
}

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_CURRENT_TASK_H_
