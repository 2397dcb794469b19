// The step machinery of mt_asyncio's Task: the unit that steps a task on a
// worker, one step (send into the coroutine, or throw), what the
// coroutine yielded (HandleYield), the wakeups, and the current task of
// each worker thread. The Python type is task.cc's.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/common/shared_refcount.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"
#include "pyext/src/loop/task.h"
#include "pyext/src/loop/task_object.h"
#include "runtime/metrics/cycle_clock.h"
#include "runtime/metrics/histogram.h"
#include "runtime/task/task.h"

namespace mt::pyext {
namespace task_internal {
namespace {

PyObject* enter_task = nullptr;  // _asyncio._enter_task
PyObject* leave_task = nullptr;  // _asyncio._leave_task
PyObject* swap_current_task = nullptr;  // _asyncio._swap_current_task
PyObject* str_throw = nullptr;
PyObject* str_cancel = nullptr;
PyObject* str_add_done_callback = nullptr;
PyObject* str_get_loop = nullptr;
PyObject* str_blocking = nullptr;
PyObject* str_context = nullptr;
PyObject* kwnames_context = nullptr;

thread_local PyObject* current_task = nullptr;

// From 3.14 stdlib keeps the current task per thread, so every step tells
// it (_enter_task/_leave_task) and asyncio.current_task() answers on every
// worker. Before 3.14 it keeps one current task per loop: with steps of one
// loop on several workers those calls would clash, so we keep our own
// (mt_asyncio's current_task answers) and leave stdlib's alone.
constexpr bool kTellAsyncio = PY_VERSION_HEX >= 0x030E0000;

}  // namespace

bool TaskUnit::Poll() {
  if (task_ == nullptr) return true;
  if (LoopDeferIfStopped(loop_, this)) return false;
  if (LoopEnterOnWorker(loop_) < 0) {
    PyErr_WriteUnraisable(loop_);
    return false;
  }
  bool done;
  {
    // Ends before the task is dropped: loop_ is borrowed from it.
    StopAfterCallback stop_after(loop_);
    SlowCallbackCheck check(loop_);
    using runtime::metrics::CycleClock;
    const std::uint64_t start = CycleClock::Now();
    const std::uint64_t queued = queued_cycles();
    done = StepTask(task_);
    const std::uint64_t cycles = CycleClock::Now() - start;
    CountStep(cycles);
    runtime::metrics::RecordTaskStep(start > queued ? CycleClock::ToNsFast(start - queued) : 0,
                                     CycleClock::ToNsFast(cycles));
    check.Done(task_);
  }
  if (!done) return false;
  PyObject* task = std::exchange(task_, nullptr);
  LoopUnregisterTask(loop_, &AsTask(task)->registry_link);
  DropTask(task);
  return true;
}

void TaskUnit::OnCancel() {
  PyObject* task = std::exchange(task_, nullptr);
  if (task != nullptr) LoopUnregisterTask(loop_, &AsTask(task)->registry_link);
  DropTaskAnyThread(task);
}

// The awaited future is done. As in stdlib, _fut_waiter keeps it until
// the step it wakes begins (StepTask clears it): libraries read it to
// tell a task about to resume with a result from one still waiting —
// anyio does not cancel the former, so the item it received is not lost —
// and a cancel() meanwhile finds the waiter done and sets _must_cancel.
void WakeTask(PyObject* self) {
  AsTask(self)->unit->Wake(rt_task::ScheduleKind::kWake);
}

namespace {

// Schedules the next step with `exc` to throw (steals the reference).
void WakeWithException(PyObject* self, PyObject* exc) {
  TaskObject* t = AsTask(self);
  PyObject* old;
  Py_BEGIN_CRITICAL_SECTION(self);
  old = t->step_exc;
  t->step_exc = exc;
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(old);
  t->unit->Wake(rt_task::ScheduleKind::kYield);
}

PyObject* MakeCancelled(PyObject* msg) {
  return msg != nullptr && msg != Py_None
             ? PyObject_CallOneArg(CancelledErrorType(), msg)
             : PyObject_CallNoArgs(CancelledErrorType());
}

}  // namespace

// Cancels what a task waits for: 1 cancelled, 0 it was done, -1 error.
// Only a plain Future is cancelled in place; anything else — a Task above
// all, whose cancel() must throw into its coroutine so its cleanup runs,
// or a subclass overriding cancel() — through its cancel() method.
int CancelWaiter(PyObject* waiter, PyObject* msg) {
  if (Py_IS_TYPE(waiter, FutureType())) {
    return FutureCancel(reinterpret_cast<FutureObject*>(waiter), msg);
  }
  PyObject* r = PyObject_CallMethodOneArg(waiter, str_cancel, msg);
  const int cancelled = r == nullptr ? -1 : PyObject_IsTrue(r);
  Py_XDECREF(r);
  return cancelled;
}

namespace {

// What a coroutine's cr_await getter returns: the object its frame awaits
// (a new reference), or None. Found once in PyCoro_Type's getsets.
getter coro_await_getter = nullptr;

// Hands the coroutines the suspended chain made on this worker to shared
// counting: the helpers a task awaits through (asyncio.streams'
// readexactly() and _wait_for_data(), drain()) are made by the worker
// that stepped the task and usually finished by the one its wake runs on,
// whose last release would queue each to its maker (see ShareRefcount).
void ShareAwaitChain(PyObject* coro) {
  if (coro_await_getter == nullptr ||
      !share_refcounts.load(std::memory_order_relaxed)) {
    return;
  }
  PyObject* next = coro_await_getter(coro, nullptr);
  for (int depth = 0; next != nullptr && PyCoro_CheckExact(next) && depth < 16;
       ++depth) {
    ShareRefcount(next);
    PyObject* inner = coro_await_getter(next, nullptr);
    Py_DECREF(next);
    next = inner;
  }
  if (next == nullptr) {
    PyErr_Clear();
  } else {
    Py_DECREF(next);
  }
}

// What the coroutine yielded: decide what to wait for.
void HandleYield(PyObject* self, PyObject* result) {
  TaskObject* t = AsTask(self);
  PyObject* loop = t->base.loop;
  // Consumed on every yield so a stale mark never outlives its step.
  const bool awaited = FutureTakeAwaitMarker(result);
  if (result == Py_None) {
    // A bare yield (sleep(0)): let others run, then continue.
    t->unit->CountSelfWake();
    t->unit->Wake(rt_task::ScheduleKind::kYield);
    return;
  }
  const bool ours = PyObject_TypeCheck(result, FutureType());
  int blocking;
  if (ours) {
    FutureObject* fut = reinterpret_cast<FutureObject*>(result);
    Py_BEGIN_CRITICAL_SECTION(result);
    blocking = awaited || fut->blocking;
    Py_END_CRITICAL_SECTION();
  } else {
    PyObject* flag = nullptr;
    if (PyObject_GetOptionalAttr(result, str_blocking, &flag) < 0) {
      WakeWithException(self, PyErr_GetRaisedException());
      return;
    }
    if (flag == nullptr || flag == Py_None) {
      Py_XDECREF(flag);
      blocking = -1;  // Not a future at all.
    } else {
      blocking = PyObject_IsTrue(flag);
      Py_DECREF(flag);
      if (blocking < 0) {
        WakeWithException(self, PyErr_GetRaisedException());
        return;
      }
    }
  }
  PyObject* error = nullptr;
  if (blocking > 0) {
    bool same_loop;
    if (ours) {
      // Compared, not held: `result` holds its loop for as long as we hold
      // `result`. A reference taken here would be one more write to the
      // loop's shared refcount, which every worker's every await makes.
      same_loop = reinterpret_cast<FutureObject*>(result)->loop == loop;
    } else {
      PyObject* fut_loop = PyObject_CallMethodNoArgs(result, str_get_loop);
      if (fut_loop == nullptr) {
        WakeWithException(self, PyErr_GetRaisedException());
        return;
      }
      same_loop = fut_loop == loop;
      Py_DECREF(fut_loop);
    }
    if (!same_loop) {
      error = PyUnicode_FromFormat("Task %R got Future %R attached to a different loop",
                                   self, result);
    } else if (result == self) {
      error = PyUnicode_FromFormat("Task cannot await on itself: %R", self);
    } else {
      if (ours) {
        Py_BEGIN_CRITICAL_SECTION(result);
        reinterpret_cast<FutureObject*>(result)->blocking = false;
        Py_END_CRITICAL_SECTION();
        const int rc = FutureAddWaker(reinterpret_cast<FutureObject*>(result), self);
        if (rc == 1) {
          // Done already: just continue. stdlib's step has it in
          // _fut_waiter until then too.
          Py_BEGIN_CRITICAL_SECTION(self);
          Py_XSETREF(t->fut_waiter, Py_NewRef(result));
          Py_END_CRITICAL_SECTION();
          t->unit->Wake(rt_task::ScheduleKind::kYield);
          return;
        }
      } else {
        if (PyObject_SetAttr(result, str_blocking, Py_False) < 0) {
          WakeWithException(self, PyErr_GetRaisedException());
          return;
        }
        PyObject* wakeup = PyObject_GetAttrString(self, "_wakeup");
        PyObject* res = nullptr;
        if (wakeup != nullptr) {
          PyObject* args[] = {result, wakeup, t->context};
          res = PyObject_VectorcallMethod(str_add_done_callback, args,
                                          2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          kwnames_context);
          Py_DECREF(wakeup);
        }
        if (res == nullptr) {
          WakeWithException(self, PyErr_GetRaisedException());
          return;
        }
        Py_DECREF(res);
      }
      // Now waiting. A cancel that arrived during the step goes to the
      // waiter, exactly as if it had arrived after.
      bool cancel_now = false;
      PyObject* msg = nullptr;
      Py_BEGIN_CRITICAL_SECTION(self);
      Py_XSETREF(t->fut_waiter, Py_NewRef(result));
      if (t->must_cancel) {
        cancel_now = true;
        msg = Py_XNewRef(t->must_cancel_msg);
      }
      Py_END_CRITICAL_SECTION();
      if (cancel_now) {
        const int cancelled = CancelWaiter(result, msg != nullptr ? msg : Py_None);
        if (cancelled < 0) PyErr_WriteUnraisable(self);
        if (cancelled > 0) {
          Py_BEGIN_CRITICAL_SECTION(self);
          t->must_cancel = false;
          Py_END_CRITICAL_SECTION();
        }
      }
      Py_XDECREF(msg);
      return;
    }
  } else if (blocking == 0) {
    error = PyUnicode_FromFormat(
        "yield was used instead of yield from in task %R with %R", self, result);
  } else if (PyGen_Check(result)) {
    error = PyUnicode_FromFormat(
        "yield was used instead of yield from for generator in task %R with %R",
        self, result);
  } else {
    error = PyUnicode_FromFormat("Task got bad yield: %R", result);
  }
  if (error == nullptr) {
    WakeWithException(self, PyErr_GetRaisedException());
    return;
  }
  PyObject* exc = PyObject_CallOneArg(PyExc_RuntimeError, error);
  Py_DECREF(error);
  if (exc == nullptr) exc = PyErr_GetRaisedException();
  WakeWithException(self, exc);
}

// A cancel requested during a task's final step, taken under the task's
// lock by TakeFinalCancel.
struct FinalCancel {
  bool requested = false;
  PyObject* msg = nullptr;  // New reference.
};

// FutureTrySetResultIf's check for a task's result: refuses it (and takes
// the request) when a cancel is pending. Runs under the task's lock.
bool TakeFinalCancel(FutureObject* fut, void* arg) {
  TaskObject* t = reinterpret_cast<TaskObject*>(fut);
  if (!t->must_cancel) return true;
  auto* cancel = static_cast<FinalCancel*>(arg);
  cancel->requested = true;
  cancel->msg = Py_XNewRef(t->must_cancel_msg);
  t->must_cancel = false;
  return false;
}

// stdlib's wakeup reads the awaited future's result before the step it
// schedules; when a cancel lands in between (the future was already done,
// so cancel() set _must_cancel) that step throws CancelledError, and the
// future's exception has been retrieved. Ours is read by the coroutine's
// own `await`, which the CancelledError skips: mark it retrieved here, or
// "Future exception was never retrieved" is reported for it (aiohttp's
// drain waiter, failed by connection_lost just before it cancels the
// handler task).
void MarkWaiterRetrieved(PyObject* waiter) {
  if (PyObject_TypeCheck(waiter, FutureType())) {
    Py_BEGIN_CRITICAL_SECTION(waiter);
    reinterpret_cast<FutureObject*>(waiter)->log_traceback = false;
    Py_END_CRITICAL_SECTION();
    return;
  }
  // A foreign future (stdlib's): its exception() marks it retrieved (and
  // raises, cleared here, if it was cancelled or is still pending).
  PyObject* raised = PyErr_GetRaisedException();
  Py_XDECREF(PyObject_CallMethod(waiter, "exception", nullptr));
  PyErr_Clear();
  PyErr_SetRaisedException(raised);
}

}  // namespace

bool StepTask(PyObject* self) {
  TaskObject* t = AsTask(self);
  PyObject* exc = nullptr;
  bool must_cancel = false;
  PyObject* msg = nullptr;
  bool done;
  PyObject* old_waiter;
  Py_BEGIN_CRITICAL_SECTION(self);
  done = t->base.state != FutureState::kPending;
  old_waiter = std::exchange(t->fut_waiter, nullptr);
  exc = t->step_exc;
  t->step_exc = nullptr;
  if (t->must_cancel) {
    must_cancel = true;
    t->must_cancel = false;
    msg = Py_XNewRef(t->must_cancel_msg);
  }
  Py_END_CRITICAL_SECTION();
  if (must_cancel && old_waiter != nullptr && !done) MarkWaiterRetrieved(old_waiter);
  Py_XDECREF(old_waiter);  // Outside the section: a decref may run Python.
  if (done) {
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    return true;
  }
  if (must_cancel) {
    Py_XDECREF(exc);
    exc = MakeCancelled(msg);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
  }
  Py_XDECREF(msg);

  PyObject* loop = t->base.loop;
  if (PyContext_Enter(t->context) < 0) {
    // Another thread is inside this context (tasks sharing one context run
    // in parallel here): fail the task rather than corrupt the context.
    Py_XDECREF(exc);
    PyObject* err = PyErr_GetRaisedException();
    FutureSetException(&t->base, err);
    Py_DECREF(err);
    return true;
  }
  // A step nested in another task's step (an eager start) swaps asyncio's
  // notion of the current task; a step of its own enters and leaves.
  PyObject* prev_task = current_task;
  const bool nested = prev_task != nullptr;
  PyObject* enter_args[] = {loop, self};
  if (kTellAsyncio) {
    PyObject* entered = PyObject_Vectorcall(nested ? swap_current_task : enter_task,
                                            enter_args, 2, nullptr);
    if (entered == nullptr) PyErr_WriteUnraisable(self);
    Py_XDECREF(entered);
  }
  current_task = self;

  PyObject* result = nullptr;
  PySendResult status;
  if (exc == nullptr) {
    status = PyIter_Send(t->coro, Py_None, &result);
  } else {
    result = PyObject_CallMethodOneArg(t->coro, str_throw, exc);
    Py_DECREF(exc);
    if (result != nullptr) {
      status = PYGEN_NEXT;
    } else if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
      PyObject* stop = PyErr_GetRaisedException();
      result = PyObject_GetAttrString(stop, "value");
      Py_DECREF(stop);
      status = result != nullptr ? PYGEN_RETURN : PYGEN_ERROR;
    } else {
      status = PYGEN_ERROR;
    }
  }
  PyObject* step_error = status == PYGEN_ERROR ? PyErr_GetRaisedException() : nullptr;

  current_task = prev_task;
  if (kTellAsyncio) {
    PyObject* left;
    if (nested) {
      PyObject* swap_back[] = {loop, prev_task};
      left = PyObject_Vectorcall(swap_current_task, swap_back, 2, nullptr);
    } else {
      left = PyObject_Vectorcall(leave_task, enter_args, 2, nullptr);
    }
    if (left == nullptr) PyErr_WriteUnraisable(self);
    Py_XDECREF(left);
  }
  if (PyContext_Exit(t->context) < 0) PyErr_WriteUnraisable(self);

  if (status == PYGEN_RETURN) {
    // A cancel during the final step wins over the result, as in stdlib:
    // checked and the result set under one lock, so a cancel() that
    // returned True is never followed by a result.
    FinalCancel cancel;
    int rc = FutureTrySetResultIf(&t->base, result, TakeFinalCancel, &cancel);
    if (rc >= 0 && cancel.requested) {
      rc = FutureCancel(&t->base, cancel.msg != nullptr ? cancel.msg : Py_None);
    }
    if (rc < 0) PyErr_WriteUnraisable(self);
    Py_XDECREF(cancel.msg);
    Py_DECREF(result);
    return true;
  }
  if (status == PYGEN_ERROR) {
    if (PyErr_GivenExceptionMatches(step_error, CancelledErrorType())) {
      PyObject* args = PyException_GetArgs(step_error);
      PyObject* cmsg = args != nullptr && PyTuple_GET_SIZE(args) > 0
                           ? PyTuple_GET_ITEM(args, 0)
                           : Py_None;
      Py_BEGIN_CRITICAL_SECTION(self);
      Py_XSETREF(t->base.cancelled_exc, Py_NewRef(step_error));
      Py_END_CRITICAL_SECTION();
      if (FutureCancel(&t->base, cmsg) < 0) PyErr_WriteUnraisable(self);
      Py_XDECREF(args);
    } else {
      if (FutureSetException(&t->base, step_error) < 0) PyErr_WriteUnraisable(self);
      // stdlib's step re-raises these out of run_forever, after setting
      // them on the task; here the thread in run_forever raises them.
      if (IsExitException(step_error)) LoopRaiseInRunner(loop, Py_NewRef(step_error));
    }
    Py_DECREF(step_error);
    return true;
  }
  if (PyCoro_CheckExact(t->coro)) ShareAwaitChain(t->coro);
  HandleYield(self, result);
  Py_DECREF(result);
  return false;
}

// --- Python-visible methods -----------------------------------------------------

int InitTaskSteps() {
  PyObject* asyncio_c = PyImport_ImportModule("_asyncio");
  if (asyncio_c == nullptr) return -1;
  enter_task = PyObject_GetAttrString(asyncio_c, "_enter_task");
  leave_task = PyObject_GetAttrString(asyncio_c, "_leave_task");
  swap_current_task = PyObject_GetAttrString(asyncio_c, "_swap_current_task");
  Py_DECREF(asyncio_c);
  for (PyGetSetDef* g = PyCoro_Type.tp_getset; g != nullptr && g->name != nullptr; ++g) {
    if (std::strcmp(g->name, "cr_await") == 0) coro_await_getter = g->get;
  }
  str_throw = PyUnicode_InternFromString("throw");
  str_cancel = PyUnicode_InternFromString("cancel");
  str_add_done_callback = PyUnicode_InternFromString("add_done_callback");
  str_get_loop = PyUnicode_InternFromString("get_loop");
  str_blocking = PyUnicode_InternFromString("_asyncio_future_blocking");
  str_context = PyUnicode_InternFromString("context");
  kwnames_context = str_context != nullptr ? PyTuple_Pack(1, str_context) : nullptr;
  if (!enter_task || !leave_task || !swap_current_task || !str_throw || !str_cancel ||
      !str_add_done_callback || !str_get_loop || !str_blocking || !kwnames_context) {
    return -1;
  }
  return 0;
}

}  // namespace task_internal

PyObject* CurrentTask() { return task_internal::current_task; }

runtime::task::Task* CurrentTaskUnit() {
  PyObject* task = task_internal::current_task;
  if (task == nullptr) return nullptr;
  return task_internal::AsTask(task)->unit;
}

}  // namespace mt::pyext
