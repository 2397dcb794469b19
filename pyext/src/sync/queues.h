#ifndef MT_PYEXT_SRC_SYNC_QUEUES_H_
#define MT_PYEXT_SRC_SYNC_QUEUES_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core.Queue: asyncio.Queue's hot paths (put/get with and
// without waiting, task_done/join, shutdown) for producers and consumers
// on several workers at once. mt_asyncio.queues derives Queue, LifoQueue
// and PriorityQueue from it.
//
// Items live in a C++ deque (FIFO, or LIFO when the class says
// `_native_storage = "lifo"`). A class with `_native_storage = None` keeps
// asyncio's subclassing contract instead: the queue calls its
// `_init(maxsize)`, `_put(item)`, `_get()` and `len(self._queue)` — under
// the queue's mutex, so they must not use the queue themselves
// (PriorityQueue's heapq calls qualify).
//
// Waiting getters and putters are futures in FIFO order; a waker pops the
// first one still pending and completes it after the mutex is released,
// and a woken waiter that is cancelled before it could act passes the turn
// on, as asyncio's does.

// Adds Queue to `module` (after RegisterLockTypes: it uses the awaiter).
// 0, or -1 with an error set.
int RegisterQueueType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_QUEUES_H_
