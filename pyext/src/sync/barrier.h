#ifndef MT_PYEXT_SRC_SYNC_BARRIER_H_
#define MT_PYEXT_SRC_SYNC_BARRIER_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core.Barrier: asyncio's Barrier (parties tasks wait until
// all have arrived, then all go on, each with its arrival index) with its
// state and waiter FIFO under one PyMutex, for tasks on several workers.
//
// The algorithm is stdlib's, which runs on a Condition: filling → the last
// arrival drains the barrier → once every waiter has left it fills again;
// reset() breaks the waiters of the round in progress (resetting until
// they have left), abort() breaks it for good. Here the Condition's lock is
// the mutex and its wait/notify_all are the waiter queue: a wait() is one
// awaiter that first waits while the barrier drains or resets, then
// arrives (counted, index taken) and waits for the round to end; whenever
// it leaves after arriving — released, broken, cancelled or closed — it is
// uncounted, and the last one out lets the barrier fill again. wait(),
// reset() and abort() return awaiters (lazy like coroutines).

// Adds the type to `module`. 0, or -1 with an error set.
int RegisterBarrierType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_BARRIER_H_
