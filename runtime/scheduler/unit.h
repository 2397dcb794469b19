#ifndef MT_RUNTIME_SCHEDULER_UNIT_H_
#define MT_RUNTIME_SCHEDULER_UNIT_H_

#include "absl/functional/any_invocable.h"

namespace mt::runtime::scheduler {

// One schedulable piece of work. Move-only so a unit has exactly one owner
// and therefore runs at most once.
using Unit = absl::AnyInvocable<void() &&>;

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_UNIT_H_
