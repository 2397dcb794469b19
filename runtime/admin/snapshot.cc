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

}  // namespace mt::runtime::admin
