#ifndef MT_PYEXT_SRC_SYNC_WAITERS_H_
#define MT_PYEXT_SRC_SYNC_WAITERS_H_

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/future/future.h"

namespace mt::pyext {

// What the synchronization primitives (locks.cc) and queues (queues.cc)
// share: a FIFO of waiter futures under the primitive's PyMutex, and the
// awaiter object their acquire()/wait()/get()/put() return.
//
// Locking rule: while a primitive's mutex is held, nothing may run that
// can re-enter it — no allocation through Python (the GC runs finalizers),
// no completing a future (its callbacks), no last reference dropped.
// Reading one of our futures' state (its own critical section) is allowed.
// The one exception is documented where a queue subclass's own _put/_get
// storage runs.

// Waiter futures in arrival order; each entry holds a reference. Only
// touched under the owner's mutex. The awaiter that queued a future holds
// its own reference until it is done with it, so an entry's reference is
// never the last one while the mutex is held.
class WaiterQueue {
 public:
  void Push(FutureObject* fut);
  // Removes `fut` if it is queued (a waker may have popped it already).
  void Remove(FutureObject* fut);
  bool empty() const { return futs_.empty(); }
  std::size_t size() const { return futs_.size(); }
  FutureObject* front() const { return futs_.front(); }
  // asyncio's "nobody queued ahead of a newcomer": every waiter left was
  // cancelled (and leaves the queue when its task runs).
  bool AllCancelled() const;
  FutureObject* FirstPending() const;
  // Pops waiters from the front up to and including the first pending one,
  // which is returned (its queue reference passes to the caller); popped
  // done ones go to `discard` (drop those references after unlocking).
  FutureObject* PopFirstPending(std::vector<FutureObject*>& discard);
  // Removes `fut` if it is queued and pending; its queue reference passes
  // to the caller. False (nothing changed) otherwise.
  bool TakeIfPending(FutureObject* fut);
  // New references to every pending waiter, in order.
  std::vector<FutureObject*> PendingSnapshot() const;
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (FutureObject* f : futs_) fn(f);
  }
  // Empties the queue, handing every reference to the caller.
  std::deque<FutureObject*> TakeAll() { return std::move(futs_); }
  int Traverse(visitproc visit, void* arg) const;

 private:
  std::deque<FutureObject*> futs_;
};

// Drops references collected under a mutex, after it was released.
void DropAll(std::vector<FutureObject*>& refs);

// A list of the futures in `queue` (pending or not, in order), for the
// `_waiters`/`_getters`/`_putters` attributes: references are taken under
// `mu` and the list is built after releasing it (it allocates). New
// reference, or nullptr with an error.
PyObject* WaitersAsList(PyMutex* mu, const WaiterQueue* queue);

// Wakes `fut` (a reference, consumed) with `value` unless it is done
// already; returns whether this call woke it. A failure to hand over its
// callbacks happens after it was completed: reported, counted as woken.
bool WakeWaiter(FutureObject* fut, PyObject* value);

// --- the primitives' common part ----------------------------------------------------

// What every primitive with one waiter queue starts with (Lock, Semaphore,
// Event, Condition). The queue lives on the heap because the object's
// memory comes from tp_alloc, not a C++ constructor.
struct PrimitiveObject {
  PyObject_HEAD
  PyMutex mu;
  WaiterQueue* waiters;
  // The loop the first wait ran on (strong), or nullptr: as asyncio's
  // primitives do, a primitive is bound to one loop once a task has had
  // to wait on it, and a wait from another loop raises RuntimeError.
  PyObject* loop;
};

inline PrimitiveObject* AsPrimitive(PyObject* o) {
  return reinterpret_cast<PrimitiveObject*>(o);
}

// Type slots for such a primitive (a type with more references of its
// own visits or clears them, then calls these).
PyObject* PrimitiveNew(PyTypeObject* type, PyObject* args, PyObject* kwargs);
int PrimitiveTraverse(PyObject* self, visitproc visit, void* arg);
int PrimitiveClear(PyObject* self);
void PrimitiveDealloc(PyObject* self);
// The `_waiters` attribute.
PyObject* PrimitiveWaiters(PyObject* self, void*);

// --- the awaiter ------------------------------------------------------------------------

struct AwaiterObject;

// How one kind of wait behaves. Each function runs without the owner's
// mutex held and takes it itself.
struct AwaiterOps {
  const char* name;  // For the repr: "acquire", "wait", "get", ...
  // First resumption: finish now (1, with aw->value set), or queue a
  // waiter (0, with AwaiterQueueUp), or fail (-1, error set).
  int (*start)(AwaiterObject* aw);
  // The queued future completed normally: 1 done (aw->value set), 0 queued
  // again (a queue that lost the item to another task), -1 error.
  int (*woken)(AwaiterObject* aw);
  // The wait ended with an exception, close() or collection: leave the
  // queue and pass on a turn this waiter was handed but will not use.
  // aw->fut is settled (done) when this runs. Must not raise.
  void (*abandon)(AwaiterObject* aw);
};

struct AwaiterObject {
  PyObject_HEAD
  const AwaiterOps* ops;  // nullptr: ready, returns `value` at once.
  unsigned char phase;
  PyObject* owner;    // The primitive (strong); nullptr when ready.
  PyObject* value;    // What the await evaluates to (strong).
  PyObject* arg;      // The operation's argument, e.g. put's item (strong).
  FutureObject* fut;  // The queued waiter while waiting (strong).
  PyObject* inner;    // fut's await iterator while waiting (strong).
  // What a kind of wait keeps between resumptions; -1 at first (Barrier:
  // the arrival index once counted).
  Py_ssize_t number;
};

// A new awaiter of `ops` on `owner` (arg may be nullptr).
PyObject* NewAwaiter(const AwaiterOps* ops, PyObject* owner, PyObject* value, PyObject* arg);
// A shared awaiter that evaluates to None at once (what __aexit__ returns).
PyObject* ReadyNone();
// A new waiter future of the running loop (RuntimeError without one).
// With `bound_loop` (the owner's loop slot, under `mu`), the owner is
// bound to the running loop on first use, and a wait from another loop
// raises RuntimeError("<owner> is bound to a different event loop") as
// asyncio's _LoopBoundMixin does. Allocates: never call it under the
// owner's mutex.
FutureObject* NewWaiterFuture(PyObject* owner = nullptr, PyMutex* mu = nullptr,
                              PyObject** bound_loop = nullptr);
// `_loop` of a primitive: the loop it is bound to, or None; settable.
PyObject* PrimitiveGetLoop(PyObject* self, void*);
int PrimitiveSetLoop(PyObject* self, PyObject* value, void*);
// What `await awaitable` drives (its __await__ iterator). New reference.
PyObject* AwaitIter(PyObject* awaitable);

// What an attempt made under a mutex leaves to do once it is released.
struct AfterUnlock {
  FutureObject* wake = nullptr;         // A waiter to wake with None.
  std::vector<FutureObject*> wake_all;  // Waiters to wake with None (references).
  std::vector<FutureObject*> discard;   // References to drop.
  std::vector<PyObject*> drop_items;    // Items a queue let go of.
  PyObject* raise = nullptr;            // An exception type to raise (borrowed).
  const char* raise_message = nullptr;  // Its message, if any.
  // An awaiter whose result becomes the int `result_number` (an int is
  // made after unlocking: nothing allocates under the mutex).
  AwaiterObject* result_for = nullptr;
  std::uint64_t result_number = 0;
  // Does the above; -1 if it raised (`raise`), else 0. Keeps an error
  // that is already set.
  int Run();
};

// One attempt of a wait, under the owner's mutex: 1 done (aw->value set),
// 0 must wait, -1 error (a Python error set, or after.raise).
using TryLocked = int (*)(AwaiterObject* aw, AfterUnlock& after);

// The usual start/woken: `try_locked` under `mu`; if it must wait, makes a
// future of the running loop with the mutex released (allocation may run
// finalizers), then tries again and, if it must still wait, pushes the
// future on `queue`. Returns 1 / 0 (waiting: aw->fut, aw->inner set) / -1.
int AwaiterTryOrQueue(AwaiterObject* aw, PyMutex* mu, WaiterQueue* queue,
                      TryLocked try_locked, PyObject** bound_loop = nullptr);

// The usual woken op of a wait that is told to look again rather than handed
// something (queues, Barrier): leaves `queue` (the waker normally popped it
// already), drops the spent future and tries again as AwaiterTryOrQueue.
int AwaiterLookAgain(AwaiterObject* aw, PyMutex* mu, WaiterQueue* queue,
                     TryLocked try_locked, PyObject** bound_loop = nullptr);

// Adds mt_asyncio._core.PrimitiveAwaiter. 0, or -1 with an error set.
int RegisterAwaiterType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_SYNC_WAITERS_H_
