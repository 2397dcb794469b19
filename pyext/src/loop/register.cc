#include "pyext/src/loop/register.h"

#include "pyext/src/loop/awaited_task.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/gather.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/strands.h"
#include "pyext/src/loop/task.h"
#include "pyext/src/loop/task_group_state.h"

namespace mt::pyext {

int RegisterLoopPackage(PyObject* module) {
  if (RegisterLoopTypes(module) < 0 || RegisterTaskType(module) < 0 ||
      RegisterGather(module) < 0 || RegisterAwaitedTaskFunctions(module) < 0 ||
      RegisterFdWatch(module) < 0 || RegisterTaskGroupState(module) < 0) {
    return -1;
  }
  return RegisterStrandFunctions(module);
}

}  // namespace mt::pyext
