#ifndef MT_PYEXT_SRC_ADMIN_STALL_REPORTS_H_
#define MT_PYEXT_SRC_ADMIN_STALL_REPORTS_H_

#include <Python.h>

#include "runtime/admin/snapshot.h"

namespace mt::pyext {

// The stall detector's reports (steps that held a worker past the
// runtime's stall threshold), kept for mt_asyncio.diagnose. The supervisor
// thread only queues a report here, never touching the interpreter: the
// stack is captured by a Python thread of the diagnose module, which waits
// for reports with _stall_wait(). A stop-the-world pause for the stack
// then never holds up the supervisor (stalls, stand-ins, shutdown).

// Queues one report (the runtime's stall handler). At most kMaxQueued wait;
// later ones are counted as dropped.
void PushStallReport(const runtime::admin::StallReport& report);

// Adds _stall_wait(timeout) and _worker_units_run(index) to `module`.
int RegisterStallReports(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_ADMIN_STALL_REPORTS_H_
