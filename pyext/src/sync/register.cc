#include "pyext/src/sync/register.h"

#include "pyext/src/sync/barrier.h"
#include "pyext/src/sync/condition.h"
#include "pyext/src/sync/locks.h"
#include "pyext/src/sync/queues.h"

namespace mt::pyext {

int RegisterSyncPackage(PyObject* module) {
  if (RegisterLockTypes(module) < 0 || RegisterQueueType(module) < 0 ||
      RegisterConditionType(module) < 0) {
    return -1;
  }
  return RegisterBarrierType(module);
}

}  // namespace mt::pyext
