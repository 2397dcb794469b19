#ifndef MT_PYEXT_SRC_SYNC_LOCKS_H_
#define MT_PYEXT_SRC_SYNC_LOCKS_H_

#include <Python.h>

namespace mt::pyext {

// The synchronization primitives' hot paths: mt_asyncio._core.Lock,
// Semaphore, BoundedSemaphore and Event (mt_asyncio.locks derives its
// public classes from them; Condition and Barrier are built on Lock there).
//
// Each keeps its state and its FIFO of waiter futures under its own
// PyMutex, so tasks on several workers may use one primitive at once. The
// algorithms are stdlib asyncio's, including who is responsible for passing
// a turn on when a woken waiter is cancelled before it could use it. Nothing
// that can run Python code (completing a future, dropping a last reference,
// allocating) happens while the mutex is held, except reading our futures'
// state.
//
// acquire(), wait() and __aenter__() return an awaiter: a small object with
// the coroutine protocol (send/throw/close/__await__), so it can also be
// handed to create_task() like the coroutine stdlib returns. Like a
// coroutine it does nothing until first resumed.

// Adds the types to `module`. 0, or -1 with an error set.
int RegisterLockTypes(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_LOCKS_H_
