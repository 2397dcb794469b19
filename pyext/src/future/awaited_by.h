#ifndef MT_PYEXT_SRC_FUTURE_AWAITED_BY_H_
#define MT_PYEXT_SRC_FUTURE_AWAITED_BY_H_

#include <Python.h>

#include "pyext/src/future/future.h"

namespace mt::pyext {

// Who awaits a future, for asyncio's call-graph introspection
// (capture_call_graph() and `future._asyncio_awaited_by`).
//
// Two sources, merged when someone asks:
//  - entries recorded with future_add_to_awaited_by(): wait(), shield()
//    and TaskGroup record the task that waits, as stdlib's do;
//  - entries read off the future's pending native done callbacks: a task's
//    waker names the task awaiting the future, gather()'s child callback
//    the task that called gather().
// Stdlib writes an entry when a task starts awaiting a future and erases
// it when the task wakes; reading the callbacks instead keeps that cost
// off the two hottest paths (every await of a future, every gather()
// child) and says the same thing while the wait lasts.

// How a native done callback names the task waiting through it: a
// borrowed reference, or nullptr for none.
using AwaitingTaskOf = PyObject* (*)(PyObject* owner);
// Declares what `native`'s owners say (at module setup, before any use).
void RegisterAwaitingTaskOf(NativeCallback native, AwaitingTaskOf resolve);

// future_add_to_awaited_by(fut, waiter) for any pair (stdlib's own
// function for a pair that is not both ours). New reference to None, or
// nullptr with an error set.
PyObject* FutureAddToAwaitedBy(PyObject* fut, PyObject* waiter);
// future_discard_from_awaited_by(fut, waiter), likewise.
PyObject* FutureDiscardFromAwaitedBy(PyObject* fut, PyObject* waiter);

// `fut._asyncio_awaited_by`: a frozenset of the futures and tasks
// awaiting `fut`, or None. New reference, or nullptr with an error set.
PyObject* AwaitedByGet(FutureObject* fut);

// Adds future_add_to_awaited_by(), future_discard_from_awaited_by() and
// the hook that hands other futures to stdlib's versions. 0, or -1 with
// an error set.
int RegisterAwaitedBy(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_FUTURE_AWAITED_BY_H_
