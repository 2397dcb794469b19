#include "pyext/src/future/future.h"

#include <cstddef>
#include <utility>
#include <vector>

#include "pyext/src/common/kwargs.h"
#include "pyext/src/common/shared_refcount.h"
#include "pyext/src/future/awaited_by.h"

namespace mt::pyext {
namespace {

const char* StateName(FutureState s) {
  switch (s) {
    case FutureState::kPending:
      return "PENDING";
    case FutureState::kCancelled:
      return "CANCELLED";
    case FutureState::kFinished:
      return "FINISHED";
  }
  return "?";
}

// What the Future needs from asyncio, imported once.
struct AsyncioRefs {
  PyObject* cancelled_error = nullptr;      // asyncio.CancelledError
  PyObject* invalid_state_error = nullptr;  // asyncio.InvalidStateError
  PyObject* get_event_loop = nullptr;       // asyncio.events.get_event_loop
  PyObject* future_repr = nullptr;          // asyncio.base_futures._future_repr
  PyObject* str_call_soon = nullptr;
  PyObject* str_context = nullptr;
  PyObject* str_call_exception_handler = nullptr;
  PyObject* kwnames_context = nullptr;      // ("context",)
};
AsyncioRefs refs;
PyTypeObject* future_type = nullptr;
PyTypeObject* future_iter_type = nullptr;
FutureHooks hooks;

}  // namespace

namespace {

FutureObject* AsFuture(PyObject* o) { return reinterpret_cast<FutureObject*>(o); }

// The future this thread's last `await` yielded (identity only); see
// FutureTakeAwaitMarker.
thread_local FutureObject* last_awaited = nullptr;

// Hands Python callbacks to the loop (in one ordered batch when the loop
// is ours). Steals the references in `python`.
int SchedulePythonCallbacks(FutureObject* fut, std::vector<Callback>& python) {
  int rc = 0;
  if (hooks.schedule_batch != nullptr) {
    const int taken = hooks.schedule_batch(fut->loop,
                                           reinterpret_cast<PyObject*>(fut), python);
    if (taken != 0) {
      python.clear();
      return taken < 0 ? -1 : 0;
    }
  }
  for (Callback& cb : python) {
    if (rc == 0) {
      PyObject* args[] = {fut->loop, cb.fn, reinterpret_cast<PyObject*>(fut),
                          cb.ctx};
      PyObject* res = PyObject_VectorcallMethod(
          refs.str_call_soon, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
          refs.kwnames_context);
      if (res == nullptr) {
        rc = -1;
      } else {
        Py_DECREF(res);
      }
    }
    Py_DECREF(cb.fn);
    Py_DECREF(cb.ctx);
  }
  python.clear();
  return rc;
}

// Hands `cbs` over in registration order: task wakers directly, the rest
// to the loop. A waker registered after Python callbacks is woken after
// they were scheduled, as asyncio runs done callbacks in the order they
// were added (asyncpg's protocol relies on its waiter's callback running
// before the task that awaited the waiter resumes). Called with no lock
// held. Steals the references in `cbs`.
int ScheduleCallbacks(FutureObject* fut, PendingCallbacks& cbs) {
  if (cbs.empty()) return 0;
  int rc = 0;
  std::vector<Callback> python;  // Allocates only if there are any.
  for (Callback& cb : cbs) {
    if (cb.native != nullptr) {
      if (!python.empty() && SchedulePythonCallbacks(fut, python) < 0) rc = -1;
      cb.native(cb.fn, fut);
      Py_DECREF(cb.fn);
    } else {
      python.push_back(cb);
    }
  }
  cbs.clear();
  if (!python.empty() && SchedulePythonCallbacks(fut, python) < 0) rc = -1;
  return rc;
}

// Appends a done callback (its references pass to the future). Caller
// holds the critical section.
void AppendCallbackLocked(FutureObject* fut, const Callback& cb) {
  if (fut->first_callback.fn == nullptr) {
    fut->first_callback = cb;
    return;
  }
  if (fut->more_callbacks == nullptr) fut->more_callbacks = new std::vector<Callback>();
  fut->more_callbacks->push_back(cb);
}

// Takes the pending callbacks out of the future. Caller holds the critical
// section.
PendingCallbacks TakeCallbacksLocked(FutureObject* fut) {
  PendingCallbacks out;
  ForEachCallback(fut, [&](const Callback& cb) { out.push_back(cb); });
  fut->first_callback = Callback{nullptr, nullptr};
  delete std::exchange(fut->more_callbacks, nullptr);
  return out;
}

PyObject* MakeCancelledError(FutureObject* fut) {
  PyObject* msg = nullptr;
  PyObject* cached = nullptr;
  Py_BEGIN_CRITICAL_SECTION(fut);
  // Handed out once, as stdlib's _asyncio does: the exception's traceback
  // holds the frames that raised it, and a future that kept it too would
  // be a reference cycle (future -> exception -> frame -> future) that
  // only the cycle collector frees, one per cancelled task awaited.
  cached = std::exchange(fut->cancelled_exc, nullptr);
  msg = Py_XNewRef(fut->cancel_msg);
  Py_END_CRITICAL_SECTION();
  if (cached != nullptr) {
    Py_XDECREF(msg);
    return cached;
  }
  PyObject* exc = msg != nullptr && msg != Py_None
                      ? PyObject_CallOneArg(refs.cancelled_error, msg)
                      : PyObject_CallNoArgs(refs.cancelled_error);
  Py_XDECREF(msg);
  return exc;
}

int SetCancelledError(FutureObject* fut) {
  PyObject* exc = MakeCancelledError(fut);
  if (exc == nullptr) return -1;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
  return 0;
}

// --- construction -------------------------------------------------------------

PyObject* SourceTracebackFor(PyObject* loop) {
  return hooks.source_traceback != nullptr ? hooks.source_traceback(loop) : nullptr;
}

PyObject* Future_new(PyTypeObject* type, PyObject*, PyObject*) {
  auto* fut = reinterpret_cast<FutureObject*>(type->tp_alloc(type, 0));
  if (fut == nullptr) return nullptr;
  fut->state = FutureState::kPending;
  return reinterpret_cast<PyObject*>(fut);
}

int Future_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"loop", nullptr};
  PyObject* loop = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:Future",
                                   const_cast<char**>(kwlist), &loop)) {
    return -1;
  }
  PyObject* resolved;
  if (loop == Py_None) {
    resolved = PyObject_CallNoArgs(refs.get_event_loop);
    if (resolved == nullptr) return -1;
  } else {
    resolved = Py_NewRef(loop);
  }
  FutureObject* fut = AsFuture(self);
  Py_XSETREF(fut->loop, resolved);
  Py_XSETREF(fut->source_traceback, SourceTracebackFor(resolved));
  return 0;
}

int Future_traverse(PyObject* self, visitproc visit, void* arg) {
  FutureObject* fut = AsFuture(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(fut->loop);
  Py_VISIT(fut->result);
  Py_VISIT(fut->exception);
  Py_VISIT(fut->exception_tb);
  Py_VISIT(fut->cancel_msg);
  Py_VISIT(fut->cancelled_exc);
  Py_VISIT(fut->dict);
  Py_VISIT(fut->awaited_by);
  Py_VISIT(fut->source_traceback);
  int r = 0;
  ForEachCallback(fut, [&](const Callback& cb) {
    if (r == 0 && cb.fn != nullptr) r = visit(cb.fn, arg);
    // A native callback has no context.
    if (r == 0 && cb.ctx != nullptr) r = visit(cb.ctx, arg);
  });
  return r;
}

int Future_clear(PyObject* self) {
  FutureObject* fut = AsFuture(self);
  Py_CLEAR(fut->loop);
  Py_CLEAR(fut->result);
  Py_CLEAR(fut->exception);
  Py_CLEAR(fut->exception_tb);
  Py_CLEAR(fut->cancel_msg);
  Py_CLEAR(fut->cancelled_exc);
  Py_CLEAR(fut->dict);
  Py_CLEAR(fut->awaited_by);
  Py_CLEAR(fut->source_traceback);
  fut->awaited_by_is_set = false;
  PendingCallbacks cbs = TakeCallbacksLocked(fut);
  for (Callback& cb : cbs) {
    Py_DECREF(cb.fn);
    Py_XDECREF(cb.ctx);
  }
  return 0;
}

// "Future exception was never retrieved": reported to the loop's exception
// handler when an unobserved exception dies with its future.
void Future_finalize(PyObject* self) {
  FutureObject* fut = AsFuture(self);
  if (!fut->log_traceback || fut->exception == nullptr || fut->loop == nullptr) {
    return;
  }
  fut->log_traceback = false;
  PyObject* saved = PyErr_GetRaisedException();
  PyObject* context = PyDict_New();
  if (context != nullptr) {
    PyObject* type_name = PyType_GetName(Py_TYPE(self));
    PyObject* message =
        type_name == nullptr
            ? nullptr
            : PyUnicode_FromFormat("%U exception was never retrieved", type_name);
    Py_XDECREF(type_name);
    if (message != nullptr &&
        PyDict_SetItemString(context, "message", message) == 0 &&
        PyDict_SetItemString(context, "exception", fut->exception) == 0 &&
        PyDict_SetItemString(context, "future", self) == 0 &&
        (fut->source_traceback == nullptr ||
         PyDict_SetItemString(context, "source_traceback", fut->source_traceback) == 0)) {
      PyObject* res = PyObject_CallMethodOneArg(
          fut->loop, refs.str_call_exception_handler, context);
      if (res == nullptr) {
        PyErr_WriteUnraisable(self);
      } else {
        Py_DECREF(res);
      }
    }
    Py_XDECREF(message);
    Py_DECREF(context);
  }
  if (PyErr_Occurred()) PyErr_WriteUnraisable(self);
  PyErr_SetRaisedException(saved);
}

void Future_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return;  // Resurrected.
  if (AsFuture(self)->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  Future_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// --- methods --------------------------------------------------------------------

PyObject* Future_done(PyObject* self, PyObject*) {
  FutureObject* fut = AsFuture(self);
  bool done;
  Py_BEGIN_CRITICAL_SECTION(self);
  done = fut->state != FutureState::kPending;
  Py_END_CRITICAL_SECTION();
  return PyBool_FromLong(done);
}

PyObject* Future_cancelled(PyObject* self, PyObject*) {
  FutureObject* fut = AsFuture(self);
  bool cancelled;
  Py_BEGIN_CRITICAL_SECTION(self);
  cancelled = fut->state == FutureState::kCancelled;
  Py_END_CRITICAL_SECTION();
  return PyBool_FromLong(cancelled);
}

PyObject* Future_result(PyObject* self, PyObject*) {
  FutureObject* fut = AsFuture(self);
  FutureState state;
  PyObject* result = nullptr;
  PyObject* exc = nullptr;
  PyObject* tb = nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  state = fut->state;
  if (state == FutureState::kFinished) {
    fut->log_traceback = false;
    result = Py_XNewRef(fut->result);
    exc = Py_XNewRef(fut->exception);
    tb = Py_XNewRef(fut->exception_tb);
  }
  Py_END_CRITICAL_SECTION();
  if (state == FutureState::kCancelled) {
    SetCancelledError(fut);
    return nullptr;
  }
  if (state != FutureState::kFinished) {
    PyErr_SetString(refs.invalid_state_error, "Result is not set.");
    return nullptr;
  }
  if (exc != nullptr) {
    Py_XDECREF(result);
    if (tb != nullptr) PyException_SetTraceback(exc, tb);
    Py_XDECREF(tb);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
    Py_DECREF(exc);
    return nullptr;
  }
  Py_XDECREF(tb);
  return result != nullptr ? result : Py_NewRef(Py_None);
}

PyObject* Future_exception(PyObject* self, PyObject*) {
  FutureObject* fut = AsFuture(self);
  FutureState state;
  PyObject* exc = nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  state = fut->state;
  if (state == FutureState::kFinished) {
    fut->log_traceback = false;
    exc = Py_XNewRef(fut->exception);
  }
  Py_END_CRITICAL_SECTION();
  if (state == FutureState::kCancelled) {
    SetCancelledError(fut);
    return nullptr;
  }
  if (state != FutureState::kFinished) {
    PyErr_SetString(refs.invalid_state_error, "Exception is not set.");
    return nullptr;
  }
  return exc != nullptr ? exc : Py_NewRef(Py_None);
}

// The message stdlib's C Future uses.
PyObject* InvalidState() {
  PyErr_SetString(refs.invalid_state_error, "invalid state");
  return nullptr;
}

// Lock-free: a future leaves kPending once, after its outcome is written.
bool IsPending(PyObject* self) {
  return AsFuture(self)->state.load(std::memory_order_acquire) == FutureState::kPending;
}

PyObject* Future_set_result(PyObject* self, PyObject* result) {
  const int rc = FutureTrySetResult(AsFuture(self), result);
  if (rc < 0) return nullptr;
  if (rc == 0) return InvalidState();
  Py_RETURN_NONE;
}

PyObject* Future_set_exception(PyObject* self, PyObject* exception) {
  FutureObject* fut = AsFuture(self);
  // Same order of checks as stdlib: state first, then the argument.
  if (!IsPending(self)) return InvalidState();
  PyObject* exc;
  if (PyExceptionClass_Check(exception)) {
    exc = PyObject_CallNoArgs(exception);
    if (exc == nullptr) return nullptr;
  } else {
    exc = Py_NewRef(exception);
  }
  if (!PyExceptionInstance_Check(exc)) {
    Py_DECREF(exc);
    PyErr_SetString(PyExc_TypeError, "invalid exception object");
    return nullptr;
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_StopIteration)) {
    // A StopIteration raised out of a coroutine would end it silently:
    // stdlib stores a RuntimeError caused by it instead.
    PyObject* err = PyObject_CallFunction(
        PyExc_RuntimeError, "s",
        "StopIteration interacts badly with generators and cannot be raised "
        "into a Future");
    if (err == nullptr) {
      Py_DECREF(exc);
      return nullptr;
    }
    PyException_SetCause(err, Py_NewRef(exc));
    PyException_SetContext(err, exc);  // Steals our reference.
    exc = err;
  }
  PyObject* tb = PyException_GetTraceback(exc);
  FutureState was;
  PendingCallbacks cbs;
  Py_BEGIN_CRITICAL_SECTION(self);
  was = fut->state;
  if (was == FutureState::kPending) {
    fut->exception = exc;
    fut->exception_tb = tb;
    exc = nullptr;
    tb = nullptr;
    fut->state = FutureState::kFinished;
    fut->log_traceback = true;
    cbs = TakeCallbacksLocked(fut);
  }
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(exc);
  Py_XDECREF(tb);
  if (was != FutureState::kPending) return InvalidState();
  if (ScheduleCallbacks(fut, cbs) < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Future_cancel(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"msg", nullptr};
  PyObject* msg = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:cancel",
                                   const_cast<char**>(kwlist), &msg)) {
    return nullptr;
  }
  const int rc = FutureCancel(AsFuture(self), msg);
  if (rc < 0) return nullptr;
  return PyBool_FromLong(rc);
}

PyObject* Future_add_done_callback(PyObject* self, PyObject* const* args,
                                   Py_ssize_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError,
                 "add_done_callback() takes exactly 1 positional argument "
                 "(%zd given)",
                 nargs);
    return nullptr;
  }
  PyObject* fn = args[0];
  PyObject* context = Py_None;
  if (ParseContextKeyword("add_done_callback", args + nargs, kwnames, &context) < 0) {
    return nullptr;
  }
  PyObject* ctx = context == Py_None ? PyContext_CopyCurrent()
                                     : Py_NewRef(context);
  if (ctx == nullptr) return nullptr;
  FutureObject* fut = AsFuture(self);
  bool done = false;
  Py_BEGIN_CRITICAL_SECTION(self);
  if (fut->state != FutureState::kPending) {
    done = true;
  } else {
    AppendCallbackLocked(fut, Callback{Py_NewRef(fn), ctx});
  }
  Py_END_CRITICAL_SECTION();
  if (done) {
    PendingCallbacks one{Callback{Py_NewRef(fn), ctx}};
    if (ScheduleCallbacks(fut, one) < 0) return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Future_remove_done_callback(PyObject* self, PyObject* fn) {
  FutureObject* fut = AsFuture(self);
  // Take the list out, compare outside the lock (== may run Python), put
  // back what stays, and merge anything registered meanwhile.
  PendingCallbacks cbs;
  Py_BEGIN_CRITICAL_SECTION(self);
  cbs = TakeCallbacksLocked(fut);
  Py_END_CRITICAL_SECTION();
  PendingCallbacks keep;
  PendingCallbacks drop;
  Py_ssize_t removed = 0;
  int error = 0;
  for (Callback& cb : cbs) {
    if (cb.native != nullptr) {  // Wakers and gather()'s are not the user's.
      keep.push_back(cb);
      continue;
    }
    int eq = error ? 0 : PyObject_RichCompareBool(cb.fn, fn, Py_EQ);
    if (eq < 0) {
      error = 1;
      eq = 0;
    }
    if (eq) {
      drop.push_back(cb);
      ++removed;
    } else {
      keep.push_back(cb);
    }
  }
  bool pending;
  Py_BEGIN_CRITICAL_SECTION(self);
  pending = fut->state == FutureState::kPending;
  if (pending) {
    PendingCallbacks late = TakeCallbacksLocked(fut);
    for (const Callback& cb : keep) AppendCallbackLocked(fut, cb);
    for (const Callback& cb : late) AppendCallbackLocked(fut, cb);
    keep.clear();
  }
  Py_END_CRITICAL_SECTION();
  // Completed while we compared: the callbacks we held still have to run.
  if (!pending && ScheduleCallbacks(fut, keep) < 0) error = 1;
  for (Callback& cb : drop) {
    Py_DECREF(cb.fn);
    Py_XDECREF(cb.ctx);
  }
  if (error) return nullptr;
  return PyLong_FromSsize_t(removed);
}

PyObject* Future_get_loop(PyObject* self, PyObject*) {
  FutureObject* fut = AsFuture(self);
  if (fut->loop == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "Future object is not initialized.");
    return nullptr;
  }
  return Py_NewRef(fut->loop);
}

PyObject* Future_make_cancelled_error(PyObject* self, PyObject*) {
  return MakeCancelledError(AsFuture(self));
}

PyObject* Future_repr(PyObject* self) {
  return PyObject_CallOneArg(refs.future_repr, self);
}

PyObject* Future_iter(PyObject* self);

// --- attributes -------------------------------------------------------------------

PyObject* GetFlag(PyObject* self, bool FutureObject::*flag) {
  bool v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = AsFuture(self)->*flag;
  Py_END_CRITICAL_SECTION();
  return PyBool_FromLong(v);
}

PyObject* Future_get_blocking(PyObject* self, void*) {
  return GetFlag(self, &FutureObject::blocking);
}

int Future_set_blocking(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete attribute");
    return -1;
  }
  const int truth = PyObject_IsTrue(value);
  if (truth < 0) return -1;
  Py_BEGIN_CRITICAL_SECTION(self);
  AsFuture(self)->blocking = truth != 0;
  Py_END_CRITICAL_SECTION();
  return 0;
}

PyObject* Future_get_log_traceback(PyObject* self, void*) {
  return GetFlag(self, &FutureObject::log_traceback);
}

int Future_set_log_traceback(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete attribute");
    return -1;
  }
  const int truth = PyObject_IsTrue(value);
  if (truth < 0) return -1;
  if (truth) {
    PyErr_SetString(PyExc_ValueError,
                    "_log_traceback can only be set to False");
    return -1;
  }
  Py_BEGIN_CRITICAL_SECTION(self);
  AsFuture(self)->log_traceback = false;
  Py_END_CRITICAL_SECTION();
  return 0;
}

PyObject* Future_get_state(PyObject* self, void*) {
  FutureState s;
  Py_BEGIN_CRITICAL_SECTION(self);
  s = AsFuture(self)->state;
  Py_END_CRITICAL_SECTION();
  return PyUnicode_FromString(StateName(s));
}

// _result, _exception, _cancel_message, _loop: read by asyncio's repr and
// by code that peeks like stdlib's own helpers do.
PyObject* GetField(PyObject* self, PyObject* FutureObject::*field) {
  PyObject* v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = Py_XNewRef(AsFuture(self)->*field);
  Py_END_CRITICAL_SECTION();
  return v != nullptr ? v : Py_NewRef(Py_None);
}
PyObject* Future_get_result_field(PyObject* self, void*) {
  return GetField(self, &FutureObject::result);
}
PyObject* Future_get_exception_field(PyObject* self, void*) {
  return GetField(self, &FutureObject::exception);
}
PyObject* Future_get_cancel_message(PyObject* self, void*) {
  return GetField(self, &FutureObject::cancel_msg);
}
int Future_set_cancel_message(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete attribute");
    return -1;
  }
  PyObject* old;
  Py_BEGIN_CRITICAL_SECTION(self);
  old = AsFuture(self)->cancel_msg;
  AsFuture(self)->cancel_msg = Py_NewRef(value);
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(old);
  return 0;
}
PyObject* Future_get_loop_field(PyObject* self, void*) {
  return GetField(self, &FutureObject::loop);
}
PyObject* Future_get_source_traceback(PyObject* self, void*) {
  return GetField(self, &FutureObject::source_traceback);
}
int Future_set_source_traceback(PyObject* self, PyObject* value, void*) {
  PyObject* old;
  Py_BEGIN_CRITICAL_SECTION(self);
  old = AsFuture(self)->source_traceback;
  AsFuture(self)->source_traceback =
      value == nullptr || value == Py_None ? nullptr : Py_NewRef(value);
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(old);
  return 0;
}
PyObject* Future_get_awaited_by(PyObject* self, void*) {
  return AwaitedByGet(AsFuture(self));
}

// _callbacks: a list of (callback, context) like stdlib's, or None.
PyObject* Future_get_callbacks(PyObject* self, void*) {
  FutureObject* fut = AsFuture(self);
  PyObject* list = PyList_New(0);
  if (list == nullptr) return nullptr;
  PendingCallbacks copy;
  Py_BEGIN_CRITICAL_SECTION(self);
  ForEachCallback(fut, [&](const Callback& cb) {
    copy.push_back(Callback{Py_NewRef(cb.fn), Py_NewRef(cb.ctx ? cb.ctx : Py_None), nullptr});
  });
  Py_END_CRITICAL_SECTION();
  int error = 0;
  for (Callback& cb : copy) {
    PyObject* pair = error ? nullptr : PyTuple_Pack(2, cb.fn, cb.ctx);
    if (pair == nullptr || PyList_Append(list, pair) < 0) error = 1;
    Py_XDECREF(pair);
    Py_DECREF(cb.fn);
    Py_DECREF(cb.ctx);
  }
  if (error) {
    Py_DECREF(list);
    return nullptr;
  }
  if (PyList_GET_SIZE(list) == 0) {
    Py_DECREF(list);
    Py_RETURN_NONE;
  }
  return list;
}

PyMethodDef future_methods[] = {
    {"result", Future_result, METH_NOARGS, "result($self, /)\n--\n\nReturn the result of the Future."},
    {"exception", Future_exception, METH_NOARGS,
     "exception($self, /)\n--\n\nReturn the exception set on the Future."},
    {"set_result", Future_set_result, METH_O, "set_result($self, result, /)\n--\n\nMark the Future done, with a result."},
    {"set_exception", Future_set_exception, METH_O,
     "set_exception($self, exception, /)\n--\n\nMark the Future done, with an exception."},
    {"add_done_callback",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Future_add_done_callback)),
     METH_FASTCALL | METH_KEYWORDS,
     "add_done_callback($self, fn, /, *, context=None)\n--\n\n"
     "Add a callback to run (through the loop) when the Future is done."},
    {"remove_done_callback", Future_remove_done_callback, METH_O,
     "remove_done_callback($self, fn, /)\n--\n\n"
     "Remove every instance of a callback; return how many."},
    {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Future_cancel)),
     METH_VARARGS | METH_KEYWORDS, "cancel($self, /, msg=None)\n--\n\nCancel the Future and schedule callbacks."},
    {"cancelled", Future_cancelled, METH_NOARGS, "cancelled($self, /)\n--\n\nTrue if the Future was cancelled."},
    {"done", Future_done, METH_NOARGS, "done($self, /)\n--\n\nTrue if the Future is done."},
    {"get_loop", Future_get_loop, METH_NOARGS, "get_loop($self, /)\n--\n\nThe loop the Future is bound to."},
    {"_make_cancelled_error", Future_make_cancelled_error, METH_NOARGS,
     "The CancelledError to raise for this cancelled Future."},
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS,
     "See PEP 585."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef future_getset[] = {
    {"_asyncio_future_blocking", Future_get_blocking, Future_set_blocking,
     nullptr, nullptr},
    {"_log_traceback", Future_get_log_traceback, Future_set_log_traceback,
     nullptr, nullptr},
    {"_state", Future_get_state, nullptr, nullptr, nullptr},
    {"_result", Future_get_result_field, nullptr, nullptr, nullptr},
    {"_exception", Future_get_exception_field, nullptr, nullptr, nullptr},
    {"_cancel_message", Future_get_cancel_message, Future_set_cancel_message,
     nullptr, nullptr},
    {"_loop", Future_get_loop_field, nullptr, nullptr, nullptr},
    {"_callbacks", Future_get_callbacks, nullptr, nullptr, nullptr},
    {"_source_traceback", Future_get_source_traceback, Future_set_source_traceback, nullptr,
     nullptr},
    {"_asyncio_awaited_by", Future_get_awaited_by, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef future_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(FutureObject, weakreflist),
     Py_READONLY, nullptr},
    {"__dictoffset__", Py_T_PYSSIZET, offsetof(FutureObject, dict), Py_READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

// --- the await iterator ---------------------------------------------------------------

struct FutureIterObject {
  PyObject_HEAD
  FutureObject* future;  // Strong; cleared when exhausted.
  bool yielded;          // The future was handed to the awaiting Task.
};

// One step of `await future`: the first step of a pending future yields
// the future itself (with _asyncio_future_blocking set, which is how a
// Task learns what to wait for); the next returns its result.
PySendResult FutureIter_am_send(PyObject* self, PyObject*, PyObject** out) {
  auto* it = reinterpret_cast<FutureIterObject*>(self);
  FutureObject* fut = it->future;
  if (fut == nullptr) {
    *out = Py_NewRef(Py_None);
    return PYGEN_RETURN;
  }
  bool pending;
  Py_BEGIN_CRITICAL_SECTION(fut);
  pending = fut->state == FutureState::kPending;
  if (pending && !it->yielded) fut->blocking = true;
  Py_END_CRITICAL_SECTION();
  if (pending && !it->yielded) {
    it->yielded = true;
    last_awaited = fut;
    // The task suspends here; whoever completes the future usually runs
    // it next on their own worker, where this iterator (and a future the
    // task made for itself) is then dropped: see ShareRefcount.
    ShareRefcount(self);
    ShareRefcount(reinterpret_cast<PyObject*>(fut));
    *out = Py_NewRef(reinterpret_cast<PyObject*>(fut));
    return PYGEN_NEXT;
  }
  it->future = nullptr;
  if (pending) {
    Py_DECREF(fut);
    PyErr_SetString(PyExc_RuntimeError, "await wasn't used with future");
    *out = nullptr;
    return PYGEN_ERROR;
  }
  PyObject* res = Future_result(reinterpret_cast<PyObject*>(fut), nullptr);
  Py_DECREF(fut);
  if (res == nullptr) {
    *out = nullptr;
    return PYGEN_ERROR;
  }
  *out = res;
  return PYGEN_RETURN;
}

PyObject* FutureIter_iternext(PyObject* self) {
  PyObject* out;
  const PySendResult result = FutureIter_am_send(self, Py_None, &out);
  return IterNextSlotFromSend(result, out);
}

PyObject* FutureIter_send(PyObject* self, PyObject*) {
  // Futures ignore the value sent in, like stdlib's.
  PyObject* out;
  const PySendResult result = FutureIter_am_send(self, Py_None, &out);
  return IterNextFromSend(result, out);
}

PyObject* FutureIter_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Py_CLEAR(reinterpret_cast<FutureIterObject*>(self)->future);
  RaiseThrowArguments(args, nargs);
  return nullptr;
}

PyObject* FutureIter_close(PyObject* self, PyObject*) {
  Py_CLEAR(reinterpret_cast<FutureIterObject*>(self)->future);
  Py_RETURN_NONE;
}

int FutureIter_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(reinterpret_cast<PyObject*>(
      reinterpret_cast<FutureIterObject*>(self)->future));
  return 0;
}

int FutureIter_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<FutureIterObject*>(self)->future);
  return 0;
}

void FutureIter_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  FutureIter_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef future_iter_methods[] = {
    {"send", FutureIter_send, METH_O, nullptr},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FutureIter_throw)),
     METH_FASTCALL, nullptr},
    {"close", FutureIter_close, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot future_iter_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(FutureIter_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(FutureIter_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(FutureIter_clear)},
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(FutureIter_iternext)},
    {Py_tp_methods, future_iter_methods},
    {Py_am_send, reinterpret_cast<void*>(FutureIter_am_send)},
    {0, nullptr},
};

PyType_Spec future_iter_spec = {
    .name = "mt_asyncio._core.FutureIter",
    .basicsize = sizeof(FutureIterObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = future_iter_slots,
};

PyObject* Future_iter(PyObject* self) {
  auto* it = PyObject_GC_New(FutureIterObject, future_iter_type);
  if (it == nullptr) return nullptr;
  it->future = reinterpret_cast<FutureObject*>(Py_NewRef(self));
  it->yielded = false;
  PyObject_GC_Track(it);
  return reinterpret_cast<PyObject*>(it);
}

PyType_Slot future_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Future_new)},
    {Py_tp_init, reinterpret_cast<void*>(Future_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Future_dealloc)},
    {Py_tp_finalize, reinterpret_cast<void*>(Future_finalize)},
    {Py_tp_traverse, reinterpret_cast<void*>(Future_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Future_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Future_repr)},
    {Py_tp_iter, reinterpret_cast<void*>(Future_iter)},
    {Py_am_await, reinterpret_cast<void*>(Future_iter)},
    {Py_tp_methods, future_methods},
    {Py_tp_getset, future_getset},
    {Py_tp_members, future_members},
    {Py_tp_doc, const_cast<char*>(
                    "A thread-safe asyncio.Future: the same API and rules, "
                    "usable from several threads at once.")},
    {0, nullptr},
};

PyType_Spec future_spec = {
    .name = "mt_asyncio._core.Future",
    .basicsize = sizeof(FutureObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = future_slots,
};

int LoadAsyncioRefs() {
  PyObject* asyncio = PyImport_ImportModule("asyncio");
  if (asyncio == nullptr) return -1;
  PyObject* events = PyImport_ImportModule("asyncio.events");
  PyObject* base_futures = PyImport_ImportModule("asyncio.base_futures");
  int rc = -1;
  if (events != nullptr && base_futures != nullptr) {
    refs.cancelled_error = PyObject_GetAttrString(asyncio, "CancelledError");
    refs.invalid_state_error = PyObject_GetAttrString(asyncio, "InvalidStateError");
    refs.get_event_loop = PyObject_GetAttrString(events, "get_event_loop");
    refs.future_repr = PyObject_GetAttrString(base_futures, "_future_repr");
    refs.str_call_soon = PyUnicode_InternFromString("call_soon");
    refs.str_context = PyUnicode_InternFromString("context");
    refs.str_call_exception_handler =
        PyUnicode_InternFromString("call_exception_handler");
    refs.kwnames_context =
        refs.str_context ? PyTuple_Pack(1, refs.str_context) : nullptr;
    if (refs.cancelled_error && refs.invalid_state_error && refs.get_event_loop &&
        refs.future_repr && refs.str_call_soon && refs.kwnames_context &&
        refs.str_call_exception_handler) {
      rc = 0;
    }
  }
  Py_XDECREF(base_futures);
  Py_XDECREF(events);
  Py_DECREF(asyncio);
  return rc;
}

}  // namespace

PyTypeObject* FutureType() { return future_type; }

void SetFutureHooks(FutureHooks h) { hooks = h; }
FutureHooks GetFutureHooks() { return hooks; }

std::uint64_t CurrentTaskId() {
  return hooks.current_task_id != nullptr ? hooks.current_task_id() : 0;
}

PyObject* CancelledErrorType() { return refs.cancelled_error; }
PyObject* InvalidStateErrorType() { return refs.invalid_state_error; }

bool FutureTakeAwaitMarker(PyObject* fut) {
  const bool marked = last_awaited == reinterpret_cast<FutureObject*>(fut);
  last_awaited = nullptr;
  return marked;
}

namespace {
void WakeTaskCallback(PyObject* task, FutureObject*) { hooks.wake_task(task); }
}  // namespace

int FutureAddNativeCallback(FutureObject* fut, PyObject* owner, NativeCallback native) {
  bool done = false;
  Py_BEGIN_CRITICAL_SECTION(fut);
  if (fut->state != FutureState::kPending) {
    done = true;
  } else {
    AppendCallbackLocked(fut, Callback{Py_NewRef(owner), nullptr, native});
  }
  Py_END_CRITICAL_SECTION();
  return done ? 1 : 0;
}

int FutureAddWaker(FutureObject* fut, PyObject* task) {
  return FutureAddNativeCallback(fut, task, WakeTaskCallback);
}

int FutureGetOutcome(FutureObject* fut, bool* cancelled, PyObject** result,
                     PyObject** exc) {
  int rc = 0;
  *cancelled = false;
  *result = nullptr;
  *exc = nullptr;
  // Done futures never change their outcome: a result or a cancellation
  // is read without the lock (gather reads every child this way). Only an
  // exception needs it, to mark it retrieved.
  switch (fut->state.load(std::memory_order_acquire)) {
    case FutureState::kPending:
      return -1;
    case FutureState::kCancelled:
      *cancelled = true;
      return 0;
    case FutureState::kFinished:
      if (fut->exception == nullptr) {
        *result = Py_NewRef(fut->result != nullptr ? fut->result : Py_None);
        return 0;
      }
      break;
  }
  Py_BEGIN_CRITICAL_SECTION(fut);
  switch (fut->state) {
    case FutureState::kPending:
      rc = -1;
      break;
    case FutureState::kCancelled:
      *cancelled = true;
      break;
    case FutureState::kFinished:
      if (fut->exception != nullptr) {
        fut->log_traceback = false;
        *exc = Py_NewRef(fut->exception);
      } else {
        *result = Py_NewRef(fut->result != nullptr ? fut->result : Py_None);
      }
      break;
  }
  Py_END_CRITICAL_SECTION();
  return rc;
}

PyObject* FutureCancelMessage(FutureObject* fut) {
  PyObject* msg;
  Py_BEGIN_CRITICAL_SECTION(fut);
  msg = Py_XNewRef(fut->cancel_msg);
  Py_END_CRITICAL_SECTION();
  return msg != nullptr ? msg : Py_NewRef(Py_None);
}

FutureState FutureCurrentState(FutureObject* fut) {
  return fut->state.load(std::memory_order_acquire);
}

PyObject* FutureAwaitIter(FutureObject* fut) {
  return Future_iter(reinterpret_cast<PyObject*>(fut));
}

bool FutureIsDone(FutureObject* fut) {
  return !IsPending(reinterpret_cast<PyObject*>(fut));
}

int FutureTrySetResult(FutureObject* fut, PyObject* result) {
  return FutureTrySetResultIf(fut, result, nullptr, nullptr);
}

int FutureTrySetResultIf(FutureObject* fut, PyObject* result,
                         bool (*allow)(FutureObject* fut, void* arg), void* arg) {
  bool set = false;
  PendingCallbacks cbs;
  Py_BEGIN_CRITICAL_SECTION(fut);
  if (fut->state == FutureState::kPending && (allow == nullptr || allow(fut, arg))) {
    fut->result = Py_NewRef(result);
    fut->state = FutureState::kFinished;
    cbs = TakeCallbacksLocked(fut);
    set = true;
  }
  Py_END_CRITICAL_SECTION();
  if (!set) return 0;
  return ScheduleCallbacks(fut, cbs) < 0 ? -1 : 1;
}

int FutureSetResult(FutureObject* fut, PyObject* result) {
  PyObject* r = Future_set_result(reinterpret_cast<PyObject*>(fut), result);
  if (r == nullptr) return -1;
  Py_DECREF(r);
  return 0;
}

PyObject* FutureCreate(PyObject* loop) {
  auto* fut = reinterpret_cast<FutureObject*>(Future_new(future_type, nullptr, nullptr));
  if (fut == nullptr) return nullptr;
  fut->loop = Py_NewRef(loop);
  fut->source_traceback = SourceTracebackFor(loop);
  return reinterpret_cast<PyObject*>(fut);
}

void SetStopIterationValue(PyObject* value) {
  if (value == Py_None) {
    PyErr_SetNone(PyExc_StopIteration);
    return;
  }
  // Wrapped in an instance: a tuple or an exception as the value must not
  // be taken for StopIteration's constructor arguments.
  PyObject* stop = PyObject_CallOneArg(PyExc_StopIteration, value);
  if (stop == nullptr) return;
  PyErr_SetObject(PyExc_StopIteration, stop);
  Py_DECREF(stop);
}

PyObject* IterNextFromSend(PySendResult result, PyObject* out) {
  switch (result) {
    case PYGEN_NEXT:
      return out;
    case PYGEN_RETURN:
      SetStopIterationValue(out);
      Py_DECREF(out);
      return nullptr;
    default:
      return nullptr;
  }
}

PyObject* IterNextSlotFromSend(PySendResult result, PyObject* out) {
  if (result == PYGEN_RETURN && out == Py_None) {
    Py_DECREF(out);
    return nullptr;
  }
  return IterNextFromSend(result, out);
}

void RaiseThrowArguments(PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 3) {
    PyErr_SetString(PyExc_TypeError, "throw() takes 1 to 3 arguments");
    return;
  }
  PyObject* type = args[0];
  PyObject* value = nargs > 1 ? args[1] : Py_None;
  if (PyExceptionInstance_Check(type)) {
    if (value != Py_None) {
      PyErr_SetString(PyExc_TypeError,
                      "instance exception may not have a separate value");
      return;
    }
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(type)), type);
    return;
  }
  if (PyExceptionClass_Check(type)) {
    PyObject* exc = value == Py_None ? PyObject_CallNoArgs(type)
                    : PyExceptionInstance_Check(value) ? Py_NewRef(value)
                                                        : PyObject_CallOneArg(type, value);
    if (exc == nullptr) return;
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return;
  }
  PyErr_SetString(PyExc_TypeError,
                  "exceptions must be classes deriving BaseException or "
                  "instances of such a class");
}

int FutureSetException(FutureObject* fut, PyObject* exc) {
  PyObject* r = Future_set_exception(reinterpret_cast<PyObject*>(fut), exc);
  if (r == nullptr) return -1;
  Py_DECREF(r);
  return 0;
}

int FutureCancel(FutureObject* fut, PyObject* msg) {
  bool cancelled = false;
  PendingCallbacks cbs;
  Py_BEGIN_CRITICAL_SECTION(fut);
  if (fut->state == FutureState::kPending) {
    fut->state = FutureState::kCancelled;
    fut->log_traceback = false;
    Py_XSETREF(fut->cancel_msg, Py_NewRef(msg));
    cbs = TakeCallbacksLocked(fut);
    cancelled = true;
  }
  Py_END_CRITICAL_SECTION();
  if (!cancelled) return 0;
  return ScheduleCallbacks(fut, cbs) < 0 ? -1 : 1;
}

PyObject* FutureMakeCancelledError(FutureObject* fut) {
  return MakeCancelledError(fut);
}

int RegisterFutureType(PyObject* module) {
  if (LoadAsyncioRefs() < 0) return -1;
  // A task's waker names the task awaiting the future.
  RegisterAwaitingTaskOf(WakeTaskCallback, [](PyObject* task) { return task; });
  future_iter_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &future_iter_spec, nullptr));
  if (future_iter_type == nullptr) return -1;
  future_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &future_spec, nullptr));
  if (future_type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, "Future",
                            reinterpret_cast<PyObject*>(future_type)) < 0) {
    return -1;
  }
  return PyModule_AddObjectRef(module, "FutureIter",
                               reinterpret_cast<PyObject*>(future_iter_type));
}

}  // namespace mt::pyext
