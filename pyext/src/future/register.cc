#include "pyext/src/future/register.h"

#include "pyext/src/future/awaited_by.h"
#include "pyext/src/future/future.h"

namespace mt::pyext {

int RegisterFuturePackage(PyObject* module) {
  if (RegisterFutureType(module) < 0) return -1;
  return RegisterAwaitedBy(module);
}

}  // namespace mt::pyext
