#include "runtime/admin/snapshot.h"

namespace mt::runtime::admin {

std::string_view RuntimeStateName(RuntimeState state) {
  switch (state) {
    case RuntimeState::kCreated:
      return "created";
    case RuntimeState::kRunning:
      return "running";
    case RuntimeState::kDraining:
      return "draining";
    case RuntimeState::kCancelling:
      return "cancelling";
    case RuntimeState::kStopping:
      return "stopping";
    case RuntimeState::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::string_view WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return "starting";
    case WorkerState::kRunning:
      return "running";
    case WorkerState::kIdle:
      return "idle";
    case WorkerState::kSearching:
      return "searching";
    case WorkerState::kParked:
      return "parked";
    case WorkerState::kDrivingReactor:
      return "driving_reactor";
    case WorkerState::kRetiring:
      return "retiring";
    case WorkerState::kExited:
      return "exited";
  }
  return "unknown";
}

}  // namespace mt::runtime::admin
