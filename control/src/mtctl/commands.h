#ifndef MT_CONTROL_SRC_MTCTL_COMMANDS_H_
#define MT_CONTROL_SRC_MTCTL_COMMANDS_H_

#include "control/src/mtctl/args.h"

namespace mt::control::mtctl {

// Runs the command in `opts.args` (after ParseGlobal) against its target.
// Returns the exit code (args.h).
int Run(const Options& opts);

}  // namespace mt::control::mtctl

#endif  // MT_CONTROL_SRC_MTCTL_COMMANDS_H_
