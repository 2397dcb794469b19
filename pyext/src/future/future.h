#ifndef MT_PYEXT_SRC_FUTURE_FUTURE_H_
#define MT_PYEXT_SRC_FUTURE_FUTURE_H_

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace mt::pyext {

// mt_asyncio's Future: asyncio.Future's API and semantics on the raw C API,
// safe to use from several threads at once.
//
// State (result, exception, callbacks) is guarded by the object's critical
// section (a per-object lock on free-threaded builds, the GIL otherwise);
// nothing that can run Python code (a call, a decref that may finalize) is
// done while it is held. Done callbacks are handed to the loop in one batch,
// in registration order, each with the context it was registered with.
enum class FutureState : unsigned char { kPending, kCancelled, kFinished };

struct FutureObject;

// A done callback that runs inline, on the thread that completes the
// future, right after the future's lock is released: task wakeups and
// gather()'s bookkeeping. It must not block; it receives `owner` (borrowed)
// and the completed future.
using NativeCallback = void (*)(PyObject* owner, FutureObject* fut);

struct Callback {
  PyObject* fn;   // Strong: the Python callable, or a native callback's owner.
  PyObject* ctx;  // Strong contextvars.Context; nullptr for a native callback.
  NativeCallback native = nullptr;  // Set exactly when ctx is nullptr.
};

// A batch of callbacks taken out of a future; no allocation for up to two.
using PendingCallbacks = absl::InlinedVector<Callback, 2>;

struct FutureObject {
  PyObject_HEAD
  // Written under the critical section, always before the outcome fields
  // it publishes; atomic so that a done future can be recognised, and its
  // outcome read, without taking the lock (results never change after).
  std::atomic<FutureState> state;
  bool blocking;       // _asyncio_future_blocking
  bool log_traceback;  // An exception was set and nobody looked at it.
  bool awaited_by_is_set;  // awaited_by is a set rather than one waiter.
  PyObject* loop;
  PyObject* result;
  PyObject* exception;
  PyObject* exception_tb;
  PyObject* cancel_msg;
  PyObject* cancelled_exc;  // The task's CancelledError, for the first result()/exception().
  // Pending done callbacks in registration order: the first inline (most
  // futures get exactly one, the awaiting task's waker, and then need no
  // allocation), the rest on the heap. first_callback.fn == nullptr: none.
  Callback first_callback;
  std::vector<Callback>* more_callbacks;
  // Waiters recorded by future_add_to_awaited_by() (awaited_by.h): none,
  // one (strong), or a set of them. Under the critical section.
  PyObject* awaited_by;
  PyObject* weakreflist;
  PyObject* dict;  // Instance __dict__: subclasses and tests set attributes.
  // Debug mode: where it was created (stdlib's _source_traceback); else
  // nullptr.
  PyObject* source_traceback;
};

// Calls fn(cb) on each pending done callback of `fut`, in registration
// order. Caller holds the critical section (or the world is stopped, for
// traverse).
template <typename Fn>
void ForEachCallback(const FutureObject* fut, Fn fn) {
  if (fut->first_callback.fn == nullptr) return;
  fn(fut->first_callback);
  if (fut->more_callbacks != nullptr) {
    for (const Callback& cb : *fut->more_callbacks) fn(cb);
  }
}

// How the loop takes over what a completed future must run. Installed by
// the loop module; without them everything goes through loop.call_soon.
struct FutureHooks {
  // Wakes a Task registered with FutureAddWaker.
  void (*wake_task)(PyObject* task) = nullptr;
  // If `loop` is ours: runs every callback in `cbs` (in order, each in its
  // context) on a worker, steals the references, returns 1. Returns 0 if
  // the loop is not ours (nothing taken), -1 on error.
  int (*schedule_batch)(PyObject* loop, PyObject* fut,
                        std::vector<Callback>& cbs) = nullptr;
  // In `loop`'s debug mode, where the calling Python code is (a new
  // reference: what stdlib keeps as _source_traceback); else nullptr, with
  // no error set.
  PyObject* (*source_traceback)(PyObject* loop) = nullptr;
  // The id (the control plane's task id) of the task this thread steps
  // now, or 0: for the packages between here and the loop (sync: a Lock
  // records its owner for the diagnostics).
  std::uint64_t (*current_task_id)() = nullptr;
};
void SetFutureHooks(FutureHooks hooks);
FutureHooks GetFutureHooks();
// hooks.current_task_id(), or 0 before the loop package installed it.
std::uint64_t CurrentTaskId();

// For Task and the loop, on any FutureObject (subclasses included).
// Registers `task` to be woken when `fut` is done. Returns 1 if it is done
// already (nothing registered), 0 when registered, -1 on error.
int FutureAddWaker(FutureObject* fut, PyObject* task);
// Registers `native(owner, fut)` to run when `fut` is done. Returns 1 if it
// is done already (nothing registered: call it yourself), 0 when
// registered.
int FutureAddNativeCallback(FutureObject* fut, PyObject* owner, NativeCallback native);
// The outcome of a done future, as result()/exception() would see it,
// without raising: *cancelled is set, or else *exc (new reference, marked
// retrieved) or *result (new reference). 0, or -1 if it is still pending.
int FutureGetOutcome(FutureObject* fut, bool* cancelled, PyObject** result,
                     PyObject** exc);
// The message a cancelled future was cancelled with (new reference; None
// if none).
PyObject* FutureCancelMessage(FutureObject* fut);
bool FutureIsDone(FutureObject* fut);
FutureState FutureCurrentState(FutureObject* fut);
// `fut.__await__()`: the iterator an `await fut` drives. New reference.
PyObject* FutureAwaitIter(FutureObject* fut);
// True if `fut` is what this thread's last `await` on one of our futures
// yielded (and forgets it). A task step asks this instead of relying on
// asyncio's _asyncio_future_blocking flag alone: that flag lives on the
// future, and tasks on several workers awaiting one future at once would
// clear it under each other.
bool FutureTakeAwaitMarker(PyObject* fut);
// Completes a pending future: 0, or -1 with an error set (InvalidStateError
// if it was not pending).
int FutureSetResult(FutureObject* fut, PyObject* result);
// Completes `fut` if it is still pending: 1 if this call completed it, 0 if
// it was done already (no error set), -1 on error. Wakers that may race a
// concurrent cancel() use this.
int FutureTrySetResult(FutureObject* fut, PyObject* result);
// FutureTrySetResult for a caller that must check its own state under the
// same lock: `allow(fut, arg)` runs inside the future's critical section
// first (it must not call Python) and the result is set only if it returns
// true. 1 set, 0 not set, -1 error.
int FutureTrySetResultIf(FutureObject* fut, PyObject* result,
                         bool (*allow)(FutureObject* fut, void* arg), void* arg);
int FutureSetException(FutureObject* fut, PyObject* exc);
// Returns 1 if cancelled now, 0 if it was done, -1 on error.
int FutureCancel(FutureObject* fut, PyObject* msg);
// A new pending mt_asyncio Future of `loop`, as Future(loop=loop) would
// make it, without parsing arguments. New reference.
PyObject* FutureCreate(PyObject* loop);
// Ends an iterator's __next__ with `return value` (StopIteration(value)).
void SetStopIterationValue(PyObject* value);
// What send(None) returns for one am_send step that gave `result` and
// `out` (a new reference, consumed): the yielded value, or nullptr with
// StopIteration(value) or the step's error set.
PyObject* IterNextFromSend(PySendResult result, PyObject* out);
// The same for the tp_iternext slot, where a return of None is nullptr
// with no error set (the iterator protocol's "exhausted"). An `await` of
// an object that is not a coroutine steps it through tp_iternext, and
// CPython (3.12+) instantiates a StopIteration as soon as one is set:
// most awaits of a future or a primitive return None, and skip that.
PyObject* IterNextSlotFromSend(PySendResult result, PyObject* out);
// Raises what `throw(*args)` on a generator would raise into its frame
// (the 1-to-3-argument form); always returns with an error set.
void RaiseThrowArguments(PyObject* const* args, Py_ssize_t nargs);
// Builds the CancelledError for a cancelled future (new reference).
PyObject* FutureMakeCancelledError(FutureObject* fut);
// Module-level references to asyncio's exception classes.
PyObject* CancelledErrorType();
PyObject* InvalidStateErrorType();

// Adds mt_asyncio._core.Future (and its await iterator) to `module`.
// Returns 0, or -1 with an exception set.
int RegisterFutureType(PyObject* module);

// The type object, for subclass checks; valid after RegisterFutureType.
PyTypeObject* FutureType();

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_FUTURE_FUTURE_H_
