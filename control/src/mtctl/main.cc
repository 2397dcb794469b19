// mtctl: the operator's command line for live mt_asyncio processes.
//
//   mtctl [--target TARGET] [-o table|wide|json] COMMAND [ARGS]
//
// `mtctl --help` lists the commands (args.cc). Exit status: 0 success,
// 1 the call failed, 2 bad usage, 3 not found (no such task, no such
// process).
//
// The parts: args (the command line), discovery (where processes serve),
// client (the connection), render (what is printed), commands.

#include <string>
#include <vector>

#include "control/src/mtctl/args.h"
#include "control/src/mtctl/commands.h"

int main(int argc, char** argv) {
  namespace mtctl = mt::control::mtctl;
  mtctl::Options opts;
  const int parsed = mtctl::ParseGlobal(
      std::vector<std::string>(argv + 1, argv + argc), &opts);
  if (parsed >= 0) return parsed;
  return mtctl::Run(opts);
}
