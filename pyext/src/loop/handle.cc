// mt_asyncio._core.Handle and TimerHandle: a scheduled callback, and the
// runtime unit that runs it on a worker.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"
#include "runtime/time/entry.h"

namespace mt::pyext {

using loop_internal::CallInContext;
using loop_internal::Clock;
using loop_internal::StateOf;
namespace task = runtime::task;

namespace {

PyTypeObject* handle_type = nullptr;
PyTypeObject* timer_handle_type = nullptr;
PyObject* str_source_traceback = nullptr;  // "source_traceback"
PyObject* format_callback_source = nullptr;  // asyncio.format_helpers

struct HandleObject {
  PyObject_HEAD
  PyObject* callback;
  PyObject* args;  // A tuple.
  PyObject* context;
  PyObject* loop;
  std::atomic<bool> cancelled;
  PyObject* weakreflist;
  PyObject* source_traceback;  // Debug mode: where it was made; else nullptr.
  // TimerHandle only.
  double when;
  // call_at() was given an int: when() and `_when` answer an int, as
  // stdlib's TimerHandle keeps the value it was given.
  bool when_is_int;
  // Owned. While armed, the timer holds the unit and the unit holds this
  // handle, so the entry outlives every use the timer makes of it.
  runtime::time::TimerEntry* entry;
};

HandleObject* AsHandle(PyObject* o) { return reinterpret_cast<HandleObject*>(o); }

// The unit that runs one handle on a worker.
class HandleUnit final : public task::Task {
 public:
  HandleUnit(PyObject* loop, PyObject* handle)
      : Task(/*scheduled=*/false), loop_(Py_NewRef(loop)), handle_(Py_NewRef(handle)) {
    ClaimForLoop(loop, this);
  }
  ~HandleUnit() override {
    DecRefAnyThread(handle_);
    DecRefAnyThread(loop_);
  }
  bool Poll() override;

 private:
  PyObject* loop_;
  PyObject* handle_;
};

void RunHandle(PyObject* loop, PyObject* self) {
  HandleObject* h = AsHandle(self);
  if (h->cancelled.load(std::memory_order_acquire)) return;
  PyObject* callback = nullptr;
  PyObject* args = nullptr;
  PyObject* ctx = nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  callback = Py_XNewRef(h->callback);
  args = Py_XNewRef(h->args);
  ctx = Py_XNewRef(h->context);
  Py_END_CRITICAL_SECTION();
  if (callback == nullptr) {  // Cancelled meanwhile.
    Py_XDECREF(args);
    Py_XDECREF(ctx);
    return;
  }
  PyObject* res = CallInContext(ctx, callback, &PyTuple_GET_ITEM(args, 0),
                                static_cast<std::size_t>(PyTuple_GET_SIZE(args)));
  if (res == nullptr) {
    PyObject* source = Py_XNewRef(h->source_traceback);  // Stdlib's context key.
    LoopReportException(loop, "Exception in callback ", self,
                        source != nullptr ? str_source_traceback : nullptr, source);
    Py_XDECREF(source);
  } else {
    Py_DECREF(res);
  }
  Py_DECREF(callback);
  Py_DECREF(args);
  Py_XDECREF(ctx);
}

bool HandleUnit::Poll() {
  if (LoopDeferIfStopped(loop_, this)) return false;
  if (LoopEnterOnWorker(loop_) < 0) {
    PyErr_WriteUnraisable(loop_);
    return true;
  }
  StopAfterCallback stop_after(loop_);
  SlowCallbackCheck check(loop_);
  RunHandle(loop_, handle_);
  check.Done(handle_);
  return true;
}

PyObject* NewHandle(PyTypeObject* type, PyObject* loop, PyObject* callback,
                    PyObject* args, PyObject* context) {
  auto* h = PyObject_GC_New(HandleObject, type);
  if (h == nullptr) return nullptr;
  h->callback = Py_NewRef(callback);
  h->args = Py_NewRef(args);
  h->context = Py_NewRef(context);
  h->loop = Py_NewRef(loop);
  new (&h->cancelled) std::atomic<bool>(false);
  h->weakreflist = nullptr;
  h->source_traceback = LoopSourceTraceback(loop);
  h->when = 0;
  h->when_is_int = false;
  h->entry = nullptr;
  PyObject_GC_Track(h);
  return reinterpret_cast<PyObject*>(h);
}

int Handle_traverse(PyObject* self, visitproc visit, void* arg) {
  HandleObject* h = AsHandle(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(h->callback);
  Py_VISIT(h->args);
  Py_VISIT(h->context);
  Py_VISIT(h->loop);
  Py_VISIT(h->source_traceback);
  return 0;
}

int Handle_clear(PyObject* self) {
  HandleObject* h = AsHandle(self);
  Py_CLEAR(h->callback);
  Py_CLEAR(h->args);
  Py_CLEAR(h->context);
  Py_CLEAR(h->loop);
  Py_CLEAR(h->source_traceback);
  return 0;
}

void Handle_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  HandleObject* h = AsHandle(self);
  if (h->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  Handle_clear(self);
  // The timer (if any) fired or was cancelled: nothing references the
  // entry any more, because an armed timer keeps this object alive.
  delete h->entry;
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* Handle_cancel(PyObject* self, PyObject*) {
  HandleObject* h = AsHandle(self);
  if (h->cancelled.exchange(true, std::memory_order_acq_rel)) Py_RETURN_NONE;
  // Drop what the callback holds, as stdlib does.
  PyObject* callback;
  PyObject* args;
  Py_BEGIN_CRITICAL_SECTION(self);
  callback = h->callback;
  args = h->args;
  h->callback = nullptr;
  h->args = nullptr;
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(callback);
  Py_XDECREF(args);
  if (h->entry != nullptr && h->loop != nullptr) {
    // Disarming releases the timer's reference to the unit at once.
    StateOf(h->loop)->runtime->driver().timers().Cancel(h->entry);
  }
  Py_RETURN_NONE;
}

PyObject* Handle_cancelled(PyObject* self, PyObject*) {
  return PyBool_FromLong(AsHandle(self)->cancelled.load(std::memory_order_acquire));
}

PyObject* Handle_get_context(PyObject* self, PyObject*) {
  PyObject* ctx = AsHandle(self)->context;
  return Py_NewRef(ctx != nullptr ? ctx : Py_None);
}

PyObject* Handle_run(PyObject* self, PyObject*) {
  HandleObject* h = AsHandle(self);
  RunHandle(h->loop, self);
  Py_RETURN_NONE;
}

// stdlib's Handle repr: "<Handle [cancelled] callback(args) at file:line>",
// TimerHandle with "when=..." after the state.
PyObject* Handle_repr(PyObject* self) {
  HandleObject* h = AsHandle(self);
  PyObject* callback = nullptr;
  PyObject* args = nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  callback = Py_XNewRef(h->callback);
  args = Py_XNewRef(h->args);
  Py_END_CRITICAL_SECTION();
  const bool cancelled = h->cancelled.load(std::memory_order_acquire);
  PyObject* source = nullptr;
  if (callback != nullptr) {
    source = PyObject_CallFunctionObjArgs(format_callback_source, callback,
                                          args != nullptr ? args : Py_None, nullptr);
  }
  Py_XDECREF(callback);
  Py_XDECREF(args);
  if (callback != nullptr && source == nullptr) return nullptr;
  const bool timer = Py_TYPE(self) == timer_handle_type;
  PyObject* r = PyUnicode_FromFormat("<%s%s", timer ? "TimerHandle" : "Handle",
                                     cancelled ? " cancelled" : "");
  if (timer && r != nullptr) {
    PyObject* when = PyFloat_FromDouble(h->when);
    PyUnicode_AppendAndDel(&r, when != nullptr ? PyUnicode_FromFormat(" when=%R", when)
                                               : nullptr);
    Py_XDECREF(when);
  }
  if (source != nullptr && r != nullptr) {
    PyUnicode_AppendAndDel(&r, PyUnicode_FromFormat(" %U", source));
  }
  if (r != nullptr) PyUnicode_AppendAndDel(&r, PyUnicode_FromString(">"));
  Py_XDECREF(source);
  return r;
}

PyObject* Handle_get_callback(PyObject* self, void*) {
  PyObject* v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = Py_XNewRef(AsHandle(self)->callback);
  Py_END_CRITICAL_SECTION();
  return v != nullptr ? v : Py_NewRef(Py_None);
}

PyObject* Handle_get_args(PyObject* self, void*) {
  PyObject* v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = Py_XNewRef(AsHandle(self)->args);
  Py_END_CRITICAL_SECTION();
  return v != nullptr ? v : Py_NewRef(Py_None);
}

PyObject* Handle_get_loop(PyObject* self, void*) {
  PyObject* loop = AsHandle(self)->loop;
  return Py_NewRef(loop != nullptr ? loop : Py_None);
}

PyObject* Handle_get_source_traceback(PyObject* self, void*) {
  PyObject* tb = AsHandle(self)->source_traceback;  // Set once, at creation.
  return Py_NewRef(tb != nullptr ? tb : Py_None);
}

PyObject* WhenOf(HandleObject* h) {
  return h->when_is_int ? PyLong_FromDouble(h->when) : PyFloat_FromDouble(h->when);
}

PyObject* TimerHandle_when(PyObject* self, PyObject*) { return WhenOf(AsHandle(self)); }

// stdlib's TimerHandle keeps its time in `_when`, which libraries read
// (aiohttp's timeout helpers): the same value, read-only here.
PyObject* TimerHandle_get_when(PyObject* self, void*) { return WhenOf(AsHandle(self)); }

PyObject* TimerHandle_get_scheduled(PyObject* self, void*) {
  HandleObject* h = AsHandle(self);
  return PyBool_FromLong(!h->cancelled.load() && h->entry != nullptr);
}

PyMethodDef handle_methods[] = {
    {"cancel", Handle_cancel, METH_NOARGS, "cancel($self, /)\n--\n\nCancel the call (no-op once run)."},
    {"cancelled", Handle_cancelled, METH_NOARGS, "cancelled($self, /)\n--\n\nTrue if cancel() was called."},
    {"get_context", Handle_get_context, METH_NOARGS, "get_context($self, /)\n--\n\nThe context it runs in."},
    {"_run", Handle_run, METH_NOARGS, "Run the callback now, on this thread."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef handle_getset[] = {
    {"_callback", Handle_get_callback, nullptr, nullptr, nullptr},
    {"_args", Handle_get_args, nullptr, nullptr, nullptr},
    {"_loop", Handle_get_loop, nullptr, nullptr, nullptr},
    {"_source_traceback", Handle_get_source_traceback, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef timer_handle_methods[] = {
    {"when", TimerHandle_when, METH_NOARGS,
     "when($self, /)\n--\n\nThe loop.time() at which the callback is scheduled."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef timer_handle_getset[] = {
    {"_scheduled", TimerHandle_get_scheduled, nullptr, nullptr, nullptr},
    {"_when", TimerHandle_get_when, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef handle_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(HandleObject, weakreflist),
     Py_READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyObject* Handle_new_refused(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "handles are created by the loop (call_soon, call_later)");
  return nullptr;
}

PyType_Slot handle_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Handle_new_refused)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Handle_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Handle_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Handle_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Handle_repr)},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {Py_tp_members, handle_members},
    {0, nullptr},
};

PyType_Spec handle_spec = {
    .name = "mt_asyncio._core.Handle",
    .basicsize = sizeof(HandleObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = handle_slots,
};

PyType_Slot timer_handle_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Handle_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Handle_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Handle_clear)},
    {Py_tp_methods, timer_handle_methods},
    {Py_tp_getset, timer_handle_getset},
    {0, nullptr},
};

PyType_Spec timer_handle_spec = {
    .name = "mt_asyncio._core.TimerHandle",
    .basicsize = sizeof(HandleObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = timer_handle_slots,
};

}  // namespace

namespace loop_internal {

PyObject* ScheduleSoon(PyObject* loop, PyObject* callback, PyObject* args,
                       PyObject* context) {
  PyObject* handle = NewHandle(handle_type, loop, callback, args, context);
  if (handle == nullptr) return nullptr;
  auto* unit = new HandleUnit(loop, handle);
  LoopWake(loop, unit);
  unit->Unref();
  return handle;
}

// The clock's time point for loop time `when`. Past what the clock can
// hold (about 292 years of nanoseconds), inf included, it is "never",
// as a deadline that far is in stdlib's heap: converting such a double
// overflows, and the timer fired at once. NaN compares false with every
// deadline in stdlib's run loop, so it runs at once there and here.
Clock::time_point DeadlineFor(double when) {
  using Seconds = std::chrono::duration<double>;
  constexpr double kLatest =
      std::chrono::duration_cast<Seconds>(Clock::duration::max()).count() * 0.999;
  if (std::isnan(when) || when <= 0) return Clock::time_point();
  if (when >= kLatest) return Clock::time_point::max();
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(Seconds(when)));
}

PyObject* ScheduleAt(PyObject* loop, double when, PyObject* callback,
                     PyObject* args, PyObject* context, bool when_is_int) {
  PyObject* handle = NewHandle(timer_handle_type, loop, callback, args, context);
  if (handle == nullptr) return nullptr;
  HandleObject* h = AsHandle(handle);
  h->when = when;
  h->when_is_int = when_is_int;
  h->entry = new runtime::time::TimerEntry();
  auto* unit = new HandleUnit(loop, handle);
  const Clock::time_point deadline = DeadlineFor(when);
  unit->set_executor(LoopExecutor(loop));
  // The fired timer wakes the unit; Poll defers it if the loop is stopped.
  StateOf(loop)->runtime->driver().timers().Arm(h->entry, deadline, unit);
  unit->Unref();  // The timer holds it now (or it is already queued).
  return handle;
}

int RegisterHandleTypes(PyObject* module) {
  PyObject* helpers = PyImport_ImportModule("asyncio.format_helpers");
  if (helpers == nullptr) return -1;
  format_callback_source = PyObject_GetAttrString(helpers, "_format_callback_source");
  str_source_traceback = PyUnicode_InternFromString("source_traceback");
  if (str_source_traceback == nullptr) return -1;
  Py_DECREF(helpers);
  if (format_callback_source == nullptr) return -1;
  handle_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &handle_spec, nullptr));
  if (handle_type == nullptr) return -1;
  timer_handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(
      module, &timer_handle_spec, reinterpret_cast<PyObject*>(handle_type)));
  if (timer_handle_type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, "Handle", reinterpret_cast<PyObject*>(handle_type)) < 0 ||
      PyModule_AddObjectRef(module, "TimerHandle",
                            reinterpret_cast<PyObject*>(timer_handle_type)) < 0) {
    return -1;
  }
  return 0;
}

}  // namespace loop_internal

PyObject* LoopNewHandle(PyObject* loop, PyObject* callback, PyObject* args,
                        PyObject* context) {
  return NewHandle(handle_type, loop, callback, args, context);
}

void LoopRunHandle(PyObject* loop, PyObject* handle) { RunHandle(loop, handle); }

void LoopScheduleHandle(PyObject* loop, PyObject* handle, task::Executor* executor) {
  auto* unit = new HandleUnit(loop, handle);
  unit->set_executor(executor);
  LoopWake(loop, unit);
  unit->Unref();
}

void LoopCancelHandle(PyObject* handle) {
  PyObject* res = Handle_cancel(handle, nullptr);
  Py_XDECREF(res);
}

}  // namespace mt::pyext
