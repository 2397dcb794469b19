#ifndef MT_PYEXT_SRC_ADMIN_ADMIN_SERVICE_H_
#define MT_PYEXT_SRC_ADMIN_ADMIN_SERVICE_H_

#include <Python.h>

#include <string>

#include "runtime/admin/admin_abi.h"

namespace mt::pyext {

// The core's side of the admin boundary (runtime/admin/admin_abi.h).
//
// Methods about the runtime itself (GetRuntime, ListWorkers,
// ResizeWorkers, SetBlockingPool, Shutdown) are answered here in C++,
// without the interpreter, so they answer even while every worker is busy
// or the interpreter is wedged. Methods about loops and tasks go to the
// Python handler mt_asyncio._admin installs (it attaches the calling
// thread to the interpreter).
const MtAdminAbi* AdminAbi();

// Installs fn(method: str, request_json: str) -> str (None clears it).
// Its exceptions become status codes: ValueError INVALID_ARGUMENT,
// LookupError NOT_FOUND, NotImplementedError UNIMPLEMENTED, others
// INTERNAL. Needs the caller attached.
void SetAdminHandler(PyObject* fn);

// One call through the boundary, for Python (mt_asyncio.runtime_info()
// reads GetRuntime this way). Returns the code and sets `body`.
int AdminCall(const std::string& method, const std::string& request, std::string* body);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_ADMIN_ADMIN_SERVICE_H_
