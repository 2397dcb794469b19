#include "pyext/src/loop.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "pyext/src/fd_watch.h"
#include "pyext/src/future.h"
#include "pyext/src/kwargs.h"
#include "pyext/src/py_ref.h"
#include "pyext/src/runtime_holder.h"
#include "pyext/src/task.h"
#include "runtime/blocking/pool.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/strand.h"
#include "runtime/time/entry.h"

namespace mt::pyext {
namespace {

namespace task = runtime::task;
using Clock = std::chrono::steady_clock;

// --- shared state -------------------------------------------------------------

// Guards one registry shard: a few pointer writes per task creation and
// completion. A pthread mutex cost more than the list update itself (the
// unlock alone was ~5% of one_million); contention is rare (16 shards), so
// a waiter spins briefly and then yields its core.
class ShardLock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

struct LoopState {
  std::shared_ptr<runtime::Runtime> runtime;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false;         // Guarded by mu.
  bool stop_requested = false;  // Guarded by mu.
  bool closed = false;          // Guarded by mu.
  std::vector<task::Task*> deferred;  // Guarded by mu; one reference each.
  std::atomic<bool> running_flag{false};
  // Debug mode: callbacks are checked when scheduled (stdlib does the same
  // only in debug mode; otherwise a bad callback fails when it runs).
  std::atomic<bool> debug{false};
  // Debug mode logs callbacks and steps that run at least this long
  // (slow_callback_duration; stdlib's default is 0.1 s).
  std::atomic<std::int64_t> slow_callback_ns{100'000'000};
  // Steps and callbacks debug mode found slow (for the control plane).
  std::atomic<std::uint64_t> slow_steps{0};
  std::atomic<bool> closed_flag{false};  // Mirrors `closed`, read lock-free.
  // Whether the loop object has a task factory: create_task reads this
  // instead of taking the loop's critical section (one lock every worker's
  // create_task would meet) in the usual case of none.
  std::atomic<bool> has_task_factory{false};
  // Pending tasks, for all_tasks(): intrusive lists (no allocation, no
  // hashing) sharded by address so task creation and completion on many
  // workers rarely meet on one mutex. Entries are borrowed: a task is
  // registered from creation until it completes (or is dropped unrun), and
  // all that time its step unit holds it alive.
  static constexpr std::size_t kTaskShards = 16;
  struct alignas(64) TaskShard {
    TaskShard() { head.prev = head.next = &head; }
    ShardLock mu;
    TaskLink head;  // Circular list sentinel.
    std::uint64_t registered = 0;  // Tasks ever registered; guarded by mu.
    std::uint64_t live = 0;        // Registered now; guarded by mu.
  };
  TaskShard task_shards[kTaskShards];
  // File descriptors registered for add_reader/add_writer and transports.
  FdTable fds;
  TaskShard& ShardFor(PyObject* task) {
    const auto h = reinterpret_cast<std::uintptr_t>(task) >> 6;
    return task_shards[h % kTaskShards];
  }
};

struct LoopObject {
  PyObject_HEAD
  LoopState* st;
  PyObject* weakreflist;
  PyObject* task_factory;  // Strong, or nullptr for the default.
};

// Loop.create_task as the type defines it: a subclass that overrides
// create_task must be called through Python.
PyObject* create_task_descr = nullptr;
PyObject* str_create_task = nullptr;

PyTypeObject* loop_type = nullptr;
PyTypeObject* handle_type = nullptr;
PyTypeObject* timer_handle_type = nullptr;

PyObject* str_call_exception_handler = nullptr;
PyObject* asyncio_logger = nullptr;  // asyncio.log.logger
PyObject* format_callback_source = nullptr;  // asyncio.format_helpers
PyObject* set_asyncgen_hooks = nullptr;      // sys.set_asyncgen_hooks
PyObject* str_asyncgen_firstiter_hook = nullptr;
PyObject* str_asyncgen_finalizer_hook = nullptr;
PyObject* set_running_loop = nullptr;  // asyncio.events._set_running_loop
PyObject* set_origin_tracking_depth = nullptr;  // sys.set_coroutine_origin_tracking_depth
PyObject* iscoroutine = nullptr;       // asyncio.coroutines.iscoroutine
PyObject* iscoroutinefunction = nullptr;

LoopState* StateOf(PyObject* loop) {
  return reinterpret_cast<LoopObject*>(loop)->st;
}

double NowSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Runs fn(*args) inside `ctx` (which may be nullptr: the current context).
PyObject* CallInContext(PyObject* ctx, PyObject* fn, PyObject* const* args,
                        std::size_t nargs) {
  if (ctx != nullptr && PyContext_Enter(ctx) < 0) return nullptr;
  PyObject* res = PyObject_Vectorcall(fn, args, nargs, nullptr);
  if (ctx != nullptr && PyContext_Exit(ctx) < 0) {
    Py_XDECREF(res);
    return nullptr;
  }
  return res;
}

// --- Handle ---------------------------------------------------------------------

struct HandleObject {
  PyObject_HEAD
  PyObject* callback;
  PyObject* args;  // A tuple.
  PyObject* context;
  PyObject* loop;
  std::atomic<bool> cancelled;
  PyObject* weakreflist;
  // TimerHandle only.
  double when;
  // Owned. While armed, the timer holds the unit and the unit holds this
  // handle, so the entry outlives every use the timer makes of it.
  runtime::time::TimerEntry* entry;
};

HandleObject* AsHandle(PyObject* o) { return reinterpret_cast<HandleObject*>(o); }

// The unit that runs one handle on a worker.
class HandleUnit final : public task::Task {
 public:
  HandleUnit(PyObject* loop, PyObject* handle)
      : Task(/*scheduled=*/false), loop_(Py_NewRef(loop)), handle_(Py_NewRef(handle)) {}
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
    LoopReportException(loop, "Exception in callback ", self, nullptr, nullptr);
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
  h->when = 0;
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
  return 0;
}

int Handle_clear(PyObject* self) {
  HandleObject* h = AsHandle(self);
  Py_CLEAR(h->callback);
  Py_CLEAR(h->args);
  Py_CLEAR(h->context);
  Py_CLEAR(h->loop);
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

PyObject* TimerHandle_when(PyObject* self, PyObject*) {
  return PyFloat_FromDouble(AsHandle(self)->when);
}

PyObject* TimerHandle_get_scheduled(PyObject* self, void*) {
  HandleObject* h = AsHandle(self);
  return PyBool_FromLong(!h->cancelled.load() && h->entry != nullptr);
}

PyMethodDef handle_methods[] = {
    {"cancel", Handle_cancel, METH_NOARGS, "Cancel the call (no-op once run)."},
    {"cancelled", Handle_cancelled, METH_NOARGS, "True if cancel() was called."},
    {"get_context", Handle_get_context, METH_NOARGS, "The context it runs in."},
    {"_run", Handle_run, METH_NOARGS, "Run the callback now, on this thread."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef handle_getset[] = {
    {"_callback", Handle_get_callback, nullptr, nullptr, nullptr},
    {"_args", Handle_get_args, nullptr, nullptr, nullptr},
    {"_loop", Handle_get_loop, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef timer_handle_methods[] = {
    {"when", TimerHandle_when, METH_NOARGS,
     "The loop.time() at which the callback is scheduled."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef timer_handle_getset[] = {
    {"_scheduled", TimerHandle_get_scheduled, nullptr, nullptr, nullptr},
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

// --- done-callback batches ---------------------------------------------------------

// Runs a completed future's done callbacks on one worker, in registration
// order, each in its own context.
class CallbackBatch final : public task::Task {
 public:
  CallbackBatch(PyObject* loop, PyObject* fut, std::vector<Callback> cbs)
      : Task(/*scheduled=*/false),
        loop_(Py_NewRef(loop)),
        fut_(Py_NewRef(fut)),
        cbs_(std::move(cbs)) {}
  ~CallbackBatch() override {
    for (Callback& cb : cbs_) {
      DecRefAnyThread(cb.fn);
      DecRefAnyThread(cb.ctx);
    }
    DecRefAnyThread(fut_);
    DecRefAnyThread(loop_);
  }
  bool Poll() override {
    if (LoopDeferIfStopped(loop_, this)) return false;
    if (LoopEnterOnWorker(loop_) < 0) {
      PyErr_WriteUnraisable(loop_);
      return true;
    }
    for (Callback& cb : cbs_) {
      SlowCallbackCheck check(loop_);
      PyObject* res = CallInContext(cb.ctx, cb.fn, &fut_, 1);
      check.Done(cb.fn);
      if (res == nullptr) {
        // Reported in the callback's context, as asyncio's handle does, so
        // a custom exception handler sees what the callback set.
        PyObject* exc = PyErr_GetRaisedException();
        const bool entered = cb.ctx != nullptr && PyContext_Enter(cb.ctx) == 0;
        if (!entered) PyErr_Clear();
        PyErr_SetRaisedException(exc);
        LoopReportException(loop_, "Exception in callback ", cb.fn, nullptr,
                            nullptr);
        if (entered && PyContext_Exit(cb.ctx) < 0) PyErr_WriteUnraisable(loop_);
      } else {
        Py_DECREF(res);
      }
    }
    return true;
  }

 private:
  PyObject* loop_;
  PyObject* fut_;
  std::vector<Callback> cbs_;
};

int ScheduleBatch(PyObject* loop, PyObject* fut, std::vector<Callback>& cbs) {
  if (!IsLoop(loop)) return 0;
  auto* unit = new CallbackBatch(loop, fut, std::move(cbs));
  cbs.clear();
  LoopWake(loop, unit);
  unit->Unref();  // The loop (or the runtime) holds it now.
  return 1;
}

// --- Loop methods ----------------------------------------------------------------------

}  // namespace

int LoopCheckRuntime(PyObject* loop) {
  // A loop runs on the runtime it was made on. Once that one has shut
  // down nothing would run what is scheduled here (a new runtime does not
  // adopt old loops): refuse it rather than lose it.
  if (StateOf(loop)->runtime->state() == runtime::admin::RuntimeState::kStopped) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the mt_asyncio runtime this loop was made on has shut down; "
                    "make a new loop");
    return -1;
  }
  return 0;
}

namespace {

int CheckClosed(PyObject* self) {
  LoopState* st = StateOf(self);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->closed) {
      PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
      return -1;
    }
  }
  return LoopCheckRuntime(self);
}

// stdlib's _check_callback: coroutines and non-callables are refused.
int CheckCallback(PyObject* callback, const char* method) {
  PyObject* is_coro = PyObject_CallOneArg(iscoroutine, callback);
  if (is_coro == nullptr) return -1;
  int coro = PyObject_IsTrue(is_coro);
  Py_DECREF(is_coro);
  if (coro == 0) {
    PyObject* is_fn = PyObject_CallOneArg(iscoroutinefunction, callback);
    if (is_fn == nullptr) return -1;
    coro = PyObject_IsTrue(is_fn);
    Py_DECREF(is_fn);
  }
  if (coro < 0) return -1;
  if (coro) {
    PyErr_Format(PyExc_TypeError, "coroutines cannot be used with %s()", method);
    return -1;
  }
  if (!PyCallable_Check(callback)) {
    PyErr_Format(PyExc_TypeError,
                 "a callable object was expected by %s(), got %R", method,
                 callback);
    return -1;
  }
  return 0;
}

// Parses (fixed..., callback, *args, context=None) from a FASTCALL call.
struct CallArgs {
  PyObject* callback = nullptr;
  PyObject* args = nullptr;  // New reference (tuple).
  PyObject* context = nullptr;  // New reference.
};

int ParseCall(const char* method, Py_ssize_t fixed, PyObject* const* args,
              Py_ssize_t nargs, PyObject* kwnames, bool check_callback,
              CallArgs& out) {
  if (nargs < fixed + 1) {
    PyErr_Format(PyExc_TypeError, "%s() missing required argument 'callback'",
                 method);
    return -1;
  }
  PyObject* context = Py_None;
  if (ParseContextKeyword(method, args + nargs, kwnames, &context) < 0) return -1;
  out.callback = args[fixed];
  if (check_callback && CheckCallback(out.callback, method) < 0) return -1;
  out.args = PyTuple_New(nargs - fixed - 1);
  if (out.args == nullptr) return -1;
  for (Py_ssize_t i = fixed + 1; i < nargs; ++i) {
    PyTuple_SET_ITEM(out.args, i - fixed - 1, Py_NewRef(args[i]));
  }
  out.context = context == Py_None ? PyContext_CopyCurrent() : Py_NewRef(context);
  if (out.context == nullptr) {
    Py_CLEAR(out.args);
    return -1;
  }
  return 0;
}

PyObject* Loop_call_soon_impl(PyObject* self, PyObject* const* args,
                              Py_ssize_t nargsf, PyObject* kwnames,
                              const char* method) {
  if (CheckClosed(self) < 0) return nullptr;
  CallArgs call;
  if (ParseCall(method, 0, args, PyVectorcall_NARGS(nargsf), kwnames,
                StateOf(self)->debug.load(std::memory_order_relaxed), call) < 0) {
    return nullptr;
  }
  PyObject* handle = NewHandle(handle_type, self, call.callback, call.args,
                               call.context);
  Py_DECREF(call.args);
  Py_DECREF(call.context);
  if (handle == nullptr) return nullptr;
  auto* unit = new HandleUnit(self, handle);
  LoopWake(self, unit);
  unit->Unref();
  return handle;
}

PyObject* Loop_call_soon(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                         PyObject* kwnames) {
  return Loop_call_soon_impl(self, args, nargsf, kwnames, "call_soon");
}

PyObject* Loop_call_soon_threadsafe(PyObject* self, PyObject* const* args,
                                    Py_ssize_t nargsf, PyObject* kwnames) {
  // Every loop method is thread-safe here; this is the same call.
  return Loop_call_soon_impl(self, args, nargsf, kwnames, "call_soon_threadsafe");
}

PyObject* ScheduleTimer(PyObject* self, double when, CallArgs& call) {
  PyObject* handle = NewHandle(timer_handle_type, self, call.callback, call.args,
                               call.context);
  Py_DECREF(call.args);
  Py_DECREF(call.context);
  if (handle == nullptr) return nullptr;
  HandleObject* h = AsHandle(handle);
  h->when = when;
  h->entry = new runtime::time::TimerEntry();
  auto* unit = new HandleUnit(self, handle);
  const auto deadline = Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(when)));
  unit->set_executor(LoopExecutor(self));
  // The fired timer wakes the unit; Poll defers it if the loop is stopped.
  StateOf(self)->runtime->driver().timers().Arm(h->entry, deadline, unit);
  unit->Unref();  // The timer holds it now (or it is already queued).
  return handle;
}

PyObject* Loop_call_later(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                          PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "call_later() missing required argument 'delay'");
    return nullptr;
  }
  if (args[0] == Py_None) {
    PyErr_SetString(PyExc_TypeError, "delay must not be None");
    return nullptr;
  }
  const double delay = PyFloat_AsDouble(args[0]);
  if (delay == -1.0 && PyErr_Occurred()) return nullptr;
  if (CheckClosed(self) < 0) return nullptr;
  CallArgs call;
  if (ParseCall("call_later", 1, args, nargs, kwnames,
                StateOf(self)->debug.load(std::memory_order_relaxed), call) < 0) {
    return nullptr;
  }
  return ScheduleTimer(self, NowSeconds() + delay, call);
}

PyObject* Loop_call_at(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                       PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "call_at() missing required argument 'when'");
    return nullptr;
  }
  if (args[0] == Py_None) {
    PyErr_SetString(PyExc_TypeError, "when cannot be None");
    return nullptr;
  }
  const double when = PyFloat_AsDouble(args[0]);
  if (when == -1.0 && PyErr_Occurred()) return nullptr;
  if (CheckClosed(self) < 0) return nullptr;
  CallArgs call;
  if (ParseCall("call_at", 1, args, nargs, kwnames,
                StateOf(self)->debug.load(std::memory_order_relaxed), call) < 0) {
    return nullptr;
  }
  return ScheduleTimer(self, when, call);
}

PyObject* Loop_time(PyObject*, PyObject*) { return PyFloat_FromDouble(NowSeconds()); }

// Runs the loop until stop(): the calling thread only waits (detached, so
// it never holds up the workers), waking every 50 ms to let signal
// handlers (Ctrl-C) run.
PyObject* Loop_run_until_stopped(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::vector<task::Task*> release;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->closed) {
      PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
      return nullptr;
    }
    if (st->running) {
      PyErr_SetString(PyExc_RuntimeError, "This event loop is already running");
      return nullptr;
    }
    st->running = true;
    st->running_flag.store(true, std::memory_order_release);
    release.swap(st->deferred);
  }
  for (task::Task* unit : release) {
    unit->Wake();
    unit->Unref();
  }
  PyObject* error = nullptr;
  while (true) {
    bool stop = false;
    Py_BEGIN_ALLOW_THREADS;
    {
      // The mutex must be released before re-attaching: a worker holding
      // the GIL (GIL builds) may be waiting for it in stop().
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait_for(lock, std::chrono::milliseconds(50),
                      [st] { return st->stop_requested; });
      stop = st->stop_requested;
    }
    Py_END_ALLOW_THREADS;
    if (stop) break;
    if (PyErr_CheckSignals() < 0) {
      error = PyErr_GetRaisedException();
      break;
    }
    if (st->runtime->state() == runtime::admin::RuntimeState::kStopped) {
      // Nothing will run this loop's work any more: say so rather than
      // wait for a stop() that cannot come.
      PyErr_SetString(PyExc_RuntimeError,
                      "the mt_asyncio runtime shut down while this loop was running");
      error = PyErr_GetRaisedException();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->running = false;
    st->stop_requested = false;
    st->running_flag.store(false, std::memory_order_release);
  }
  if (error != nullptr) {
    PyErr_SetRaisedException(error);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Loop_stop(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->stop_requested = true;
  }
  st->cv.notify_all();
  Py_RETURN_NONE;
}

PyObject* Loop_close_core(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::vector<task::Task*> dropped;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->running) {
      PyErr_SetString(PyExc_RuntimeError, "Cannot close a running event loop");
      return nullptr;
    }
    st->closed = true;
    st->closed_flag.store(true, std::memory_order_release);
    dropped.swap(st->deferred);
  }
  // Work that never got to run: its cancel path releases what it holds.
  for (task::Task* unit : dropped) {
    unit->Cancel();
    unit->Unref();
  }
  // A closed selector loop forgets its readers and writers; transports
  // still open are closed.
  FdTableCloseAll(self);
  Py_RETURN_NONE;
}

PyObject* Loop_is_running(PyObject* self, PyObject*) {
  return PyBool_FromLong(StateOf(self)->running_flag.load(std::memory_order_acquire));
}

PyObject* Loop_is_closed(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::lock_guard<std::mutex> lock(st->mu);
  return PyBool_FromLong(st->closed);
}

PyObject* Loop_set_core_debug(PyObject* self, PyObject* flag) {
  const int on = PyObject_IsTrue(flag);
  if (on < 0) return nullptr;
  StateOf(self)->debug.store(on != 0, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

// A blocking-pool thread keeps one Python thread state for its whole life
// and attaches it only around each job: creating and destroying a thread
// state per job (what a bare PyGILState_Ensure/Release pair does on a
// non-Python thread) cost more than a short job itself. Detached between
// jobs, so an idle pool thread never holds up a stop-the-world pause.
struct BlockingThreadState {
  PyThreadState* ts = nullptr;
  PyGILState_STATE gil{};
  ~BlockingThreadState() {
    // Thread exit (the pool retired it). During or after finalization the
    // state is the interpreter's to reclaim.
    if (ts != nullptr && Py_IsInitialized() && !Py_IsFinalizing()) {
      PyEval_RestoreThread(ts);
      PyGILState_Release(gil);
    }
  }
};
thread_local BlockingThreadState blocking_thread_state;

class AttachedForBlockingJob {
 public:
  AttachedForBlockingJob() {
    BlockingThreadState& bts = blocking_thread_state;
    if (bts.ts == nullptr) {
      bts.gil = PyGILState_Ensure();
      bts.ts = PyThreadState_Get();
    } else {
      PyEval_RestoreThread(bts.ts);
    }
  }
  ~AttachedForBlockingJob() { PyEval_SaveThread(); }
  AttachedForBlockingJob(const AttachedForBlockingJob&) = delete;
  AttachedForBlockingJob& operator=(const AttachedForBlockingJob&) = delete;
};

// run_in_executor(None, ...): func(*args) on the runtime's blocking pool,
// its outcome delivered to `fut` (one of our thread-safe futures). The
// pool's threads are not Python threads: each job attaches for its run.
PyObject* Loop_run_blocking(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyObject_TypeCheck(args[0], FutureType()) ||
      !PyTuple_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_run_blocking(future, func, args_tuple)");
    return nullptr;
  }
  PyObject* fut = Py_NewRef(args[0]);
  PyObject* func = Py_NewRef(args[1]);
  PyObject* fargs = Py_NewRef(args[2]);
  auto release = [](PyObject* a, PyObject* b, PyObject* c) {
    DecRefAnyThread(a);
    DecRefAnyThread(b);
    DecRefAnyThread(c);
  };
  absl::StatusOr<runtime::blocking::BlockingPool::Handle> handle =
      StateOf(self)->runtime->blocking_pool().Spawn(
          [fut, func, fargs]() {
            if (!Py_IsInitialized() || Py_IsFinalizing()) return;
            AttachedForBlockingJob attached;
            auto* f = reinterpret_cast<FutureObject*>(fut);
            if (!FutureIsDone(f)) {  // Cancelled before it started: skip.
              PyObject* res = PyObject_Call(func, fargs, nullptr);
              if (res != nullptr) {
                if (FutureSetResult(f, res) < 0) PyErr_Clear();  // Lost a race.
                Py_DECREF(res);
              } else {
                PyObject* exc = PyErr_GetRaisedException();
                if (FutureSetException(f, exc) < 0) PyErr_Clear();
                Py_DECREF(exc);
              }
            }
            Py_DECREF(fargs);
            Py_DECREF(func);
            Py_DECREF(fut);
          },
          [fut, func, fargs, release]() {
            // Never started (the runtime shut down): the awaiting task must
            // not wait forever.
            if (Py_IsInitialized() && !Py_IsFinalizing()) {
              PyGILState_STATE gil = PyGILState_Ensure();
              if (FutureCancel(reinterpret_cast<FutureObject*>(fut), Py_None) < 0) {
                PyErr_Clear();
              }
              PyGILState_Release(gil);
            }
            release(fargs, func, fut);
          });
  if (!handle.ok()) {
    Py_DECREF(fargs);
    Py_DECREF(func);
    Py_DECREF(fut);
    PyErr_SetString(PyExc_RuntimeError, std::string(handle.status().message()).c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Loop_all_tasks(PyObject* self, PyObject*) {
  PyObject* out = PySet_New(nullptr);
  if (out == nullptr) return nullptr;
  LoopState* st = StateOf(self);
  for (auto& shard : st->task_shards) {
    std::vector<PyObject*> snapshot;
    {
      std::lock_guard<ShardLock> lock(shard.mu);
      for (TaskLink* l = shard.head.next; l != &shard.head; l = l->next) {
        snapshot.push_back(Py_NewRef(l->owner));
      }
    }
    int error = 0;
    for (PyObject* t : snapshot) {
      if (!error && PySet_Add(out, t) < 0) error = 1;
      Py_DECREF(t);
    }
    if (error) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  return out;
}

PyObject* Loop_deferred_count(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::lock_guard<std::mutex> lock(st->mu);
  return PyLong_FromSize_t(st->deferred.size());
}

// _mt_counts(by_state) -> (tasks ever created, slow steps seen, pending,
// running, ready, waiting) for the control plane. Pending comes from
// counters kept under the registry's locks (cheap: what Watch asks for at
// its interval). The states need one pass over the registry in C++,
// reading each task's unit state word, holding each shard's lock while it
// walks it (about 8 ms for 200,000 tasks, on demand only); without
// `by_state` they are 0.
PyObject* Loop_mt_counts(PyObject* self, PyObject* by_state_arg) {
  const int by_state = PyObject_IsTrue(by_state_arg);
  if (by_state < 0) return nullptr;
  LoopState* st = StateOf(self);
  std::uint64_t created = 0, live = 0, states[4] = {0, 0, 0, 0};
  for (auto& shard : st->task_shards) {
    std::lock_guard<ShardLock> lock(shard.mu);
    created += shard.registered;
    live += shard.live;
    if (!by_state) continue;
    for (TaskLink* l = shard.head.next; l != &shard.head; l = l->next) {
      ++states[static_cast<int>(TaskStepStateOf(l->owner))];
    }
  }
  using S = TaskStepState;
  return Py_BuildValue(
      "(KKKKKK)", static_cast<unsigned long long>(created),
      static_cast<unsigned long long>(st->slow_steps.load(std::memory_order_relaxed)),
      static_cast<unsigned long long>(live),
      static_cast<unsigned long long>(states[static_cast<int>(S::kRunning)]),
      static_cast<unsigned long long>(states[static_cast<int>(S::kReady)]),
      static_cast<unsigned long long>(states[static_cast<int>(S::kWaiting)]));
}

PyObject* Loop_new(PyTypeObject* type, PyObject*, PyObject*) {
  std::shared_ptr<runtime::Runtime> rt = RuntimeHolder::Instance().EnsureStarted();
  if (!rt) {
    PyErr_SetString(PyExc_RuntimeError, "the mt_asyncio runtime could not start");
    return nullptr;
  }
  auto* self = reinterpret_cast<LoopObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->st = new LoopState();
  self->st->runtime = std::move(rt);
  return reinterpret_cast<PyObject*>(self);
}

void Loop_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  auto* loop = reinterpret_cast<LoopObject*>(self);
  if (loop->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  Py_CLEAR(loop->task_factory);
  if (loop->st != nullptr) {
    // Deferred units hold a reference to this loop, so none is left here.
    delete loop->st;
    loop->st = nullptr;
  }
  type->tp_free(self);
  Py_DECREF(type);
}

int Loop_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(reinterpret_cast<LoopObject*>(self)->task_factory);
  return 0;
}

int Loop_clear(PyObject* self) {
  auto* loop = reinterpret_cast<LoopObject*>(self);
  if (loop->st != nullptr) loop->st->has_task_factory.store(false, std::memory_order_release);
  Py_CLEAR(loop->task_factory);
  return 0;
}

PyObject* CheckedTaskFactory(PyObject* self) {
  if (!StateOf(self)->has_task_factory.load(std::memory_order_acquire)) return nullptr;
  PyObject* f;
  Py_BEGIN_CRITICAL_SECTION(self);
  f = Py_XNewRef(reinterpret_cast<LoopObject*>(self)->task_factory);
  Py_END_CRITICAL_SECTION();
  return f;
}

#if PY_VERSION_HEX < 0x030E0000
// Before 3.14 a task factory is called as factory(loop, coro) or, with a
// context, factory(loop, coro, context=ctx), and the task is then renamed
// with set_name(name) — even to None, as 3.13's stdlib does.
PyObject* CallFactory313(PyObject* self, PyObject* factory, PyObject* coro,
                         PyObject* const* kwvalues, PyObject* kwnames) {
  PyObject* name = Py_None;
  PyObject* context = Py_None;
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(key, "name") == 0) {
      name = kwvalues[i];
    } else if (PyUnicode_CompareWithASCIIString(key, "context") == 0) {
      context = kwvalues[i];
    } else {
      Py_DECREF(factory);
      PyErr_Format(PyExc_TypeError,
                   "create_task() got an unexpected keyword argument '%U'", key);
      return nullptr;
    }
  }
  PyObject* task = context == Py_None
                       ? PyObject_CallFunctionObjArgs(factory, self, coro, nullptr)
                       : nullptr;
  if (context != Py_None) {
    PyObject* call_args[] = {self, coro, context};
    PyObject* kw = Py_BuildValue("(s)", "context");
    task = kw != nullptr ? PyObject_Vectorcall(factory, call_args, 2, kw) : nullptr;
    Py_XDECREF(kw);
  }
  Py_DECREF(factory);
  if (task == nullptr) return nullptr;
  PyObject* r = PyObject_CallMethod(task, "set_name", "O", name);
  if (r == nullptr) {
    Py_DECREF(task);
    return nullptr;
  }
  Py_DECREF(r);
  return task;
}
#endif

// create_task(coro, *, name=None, context=None, eager_start=None, **kwargs):
// the task factory gets every keyword as given (3.14 rules); without one,
// our Task is built directly.
PyObject* Loop_create_future(PyObject* self, PyObject*) { return FutureCreate(self); }

PyObject* Loop_create_task(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                           PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError,
                 "create_task() takes exactly 1 positional argument (%zd given)", nargs);
    return nullptr;
  }
  if (StateOf(self)->closed_flag.load(std::memory_order_acquire)) {
    PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
    return nullptr;
  }
  if (LoopCheckRuntime(self) < 0) return nullptr;
  PyObject* factory = CheckedTaskFactory(self);
#if PY_VERSION_HEX < 0x030E0000
  if (factory != nullptr) return CallFactory313(self, factory, args[0], args + nargs, kwnames);
#endif
  if (factory != nullptr) {
    // factory(self, coro, **kwargs): self goes in front of our arguments.
    // create_task takes at most a few keywords, so the common case needs
    // no allocation (an eager factory makes every task through here).
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    absl::InlinedVector<PyObject*, 6> call_args(2 + nkw);
    call_args[0] = self;
    call_args[1] = args[0];
    for (Py_ssize_t i = 0; i < nkw; ++i) call_args[2 + i] = args[1 + i];
    PyObject* task = PyObject_Vectorcall(factory, call_args.data(), 2, kwnames);
    Py_DECREF(factory);
    return task;
  }
  PyObject* name = Py_None;
  PyObject* context = Py_None;
  int eager = 0;
  if (kwnames != nullptr) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, i);
      PyObject* value = args[nargs + i];
      if (PyUnicode_CompareWithASCIIString(key, "name") == 0) {
        name = value;
      } else if (PyUnicode_CompareWithASCIIString(key, "context") == 0) {
        context = value;
      } else if (PyUnicode_CompareWithASCIIString(key, "eager_start") == 0) {
        eager = PyObject_IsTrue(value);
        if (eager < 0) return nullptr;
      } else {
        PyErr_Format(PyExc_TypeError,
                     "create_task() got an unexpected keyword argument '%U'", key);
        return nullptr;
      }
    }
  }
  return TaskCreate(self, args[0], name, context, eager != 0);
}

PyObject* Loop_set_task_factory(PyObject* self, PyObject* factory) {
  if (factory != Py_None && !PyCallable_Check(factory)) {
    PyErr_SetString(PyExc_TypeError, "task factory must be a callable or None");
    return nullptr;
  }
  PyObject* old;
  Py_BEGIN_CRITICAL_SECTION(self);
  auto* loop = reinterpret_cast<LoopObject*>(self);
  old = loop->task_factory;
  loop->task_factory = factory == Py_None ? nullptr : Py_NewRef(factory);
  loop->st->has_task_factory.store(loop->task_factory != nullptr, std::memory_order_release);
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyObject* Loop_get_task_factory(PyObject* self, PyObject*) {
  PyObject* f = CheckedTaskFactory(self);
  return f != nullptr ? f : Py_NewRef(Py_None);
}

PyObject* Loop_get_slow_callback_duration(PyObject* self, void*) {
  const std::int64_t ns = StateOf(self)->slow_callback_ns.load(std::memory_order_relaxed);
  return PyFloat_FromDouble(static_cast<double>(ns) / 1e9);
}

int Loop_set_slow_callback_duration(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete slow_callback_duration");
    return -1;
  }
  const double seconds = PyFloat_AsDouble(value);
  if (seconds == -1.0 && PyErr_Occurred()) return -1;
  const double ns = seconds * 1e9;
  StateOf(self)->slow_callback_ns.store(
      ns <= 0 ? 0 : ns >= 9e18 ? INT64_MAX : static_cast<std::int64_t>(ns),
      std::memory_order_relaxed);
  return 0;
}

PyObject* Loop_get_task_factory_attr(PyObject* self, void*) {
  return Loop_get_task_factory(self, nullptr);
}

#define FASTCALL_KW(fn) \
  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn))

PyMethodDef loop_methods[] = {
    {"call_soon", FASTCALL_KW(Loop_call_soon), METH_FASTCALL | METH_KEYWORDS,
     "Run callback(*args) on a worker as soon as possible."},
    {"call_soon_threadsafe", FASTCALL_KW(Loop_call_soon_threadsafe),
     METH_FASTCALL | METH_KEYWORDS, "Same as call_soon: every method is thread-safe."},
    {"call_later", FASTCALL_KW(Loop_call_later), METH_FASTCALL | METH_KEYWORDS,
     "Run callback(*args) after delay seconds."},
    {"call_at", FASTCALL_KW(Loop_call_at), METH_FASTCALL | METH_KEYWORDS,
     "Run callback(*args) at loop time `when`."},
    {"time", Loop_time, METH_NOARGS, "The loop's clock (time.monotonic())."},
    {"stop", Loop_stop, METH_NOARGS, "Make run_forever() return."},
    {"is_running", Loop_is_running, METH_NOARGS, "True while run_forever runs."},
    {"is_closed", Loop_is_closed, METH_NOARGS, "True once closed."},
    {"_run_until_stopped", Loop_run_until_stopped, METH_NOARGS,
     "Let the workers run this loop's work until stop()."},
    {"_close_core", Loop_close_core, METH_NOARGS,
     "Refuse new work and cancel what never ran."},
    {"_set_core_debug", Loop_set_core_debug, METH_O,
     "Check callbacks when they are scheduled (debug mode)."},
    {"_run_blocking",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Loop_run_blocking)),
     METH_FASTCALL, "Run func(*args) on the runtime's blocking pool into a future."},
    {"create_future", Loop_create_future, METH_NOARGS,
     "A new Future attached to this loop."},
    {"create_task", FASTCALL_KW(Loop_create_task), METH_FASTCALL | METH_KEYWORDS,
     "Wrap a coroutine in a Task scheduled on this loop."},
    {"set_task_factory", Loop_set_task_factory, METH_O,
     "Use factory(loop, coro, **kwargs) for create_task (None: the default)."},
    {"get_task_factory", Loop_get_task_factory, METH_NOARGS,
     "The task factory, or None."},
    {"_all_tasks", Loop_all_tasks, METH_NOARGS,
     "The loop's tasks that have not completed (a set)."},
    {"_mt_counts", Loop_mt_counts, METH_O,
     "_mt_counts(by_state): (created, slow steps, pending, running, ready, waiting)."},
    {"_deferred_count", Loop_deferred_count, METH_NOARGS,
     "Units waiting for the loop to run (tests, debugging)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef loop_getset[] = {
    {"_task_factory", Loop_get_task_factory_attr, nullptr, nullptr, nullptr},
    {"slow_callback_duration", Loop_get_slow_callback_duration,
     Loop_set_slow_callback_duration,
     "In debug mode, callbacks and steps running this long (seconds) are logged.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef loop_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(LoopObject, weakreflist),
     Py_READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot loop_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Loop_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Loop_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Loop_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Loop_clear)},
    {Py_tp_methods, loop_methods},
    {Py_tp_members, loop_members},
    {Py_tp_getset, loop_getset},
    {0, nullptr},
};

PyType_Spec loop_spec = {
    .name = "mt_asyncio._core.Loop",
    .basicsize = sizeof(LoopObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = loop_slots,
};

}  // namespace

bool IsLoop(PyObject* obj) {
  return loop_type != nullptr && PyObject_TypeCheck(obj, loop_type);
}

namespace {
thread_local HeldFirstSteps* held_first_steps = nullptr;
}  // namespace

HeldFirstSteps::HeldFirstSteps() : outer_(std::exchange(held_first_steps, this)) {}

HeldFirstSteps::~HeldFirstSteps() {
  held_first_steps = outer_;
  // A loop stopped meanwhile defers them, as LoopWake does for any unit.
  for (const Held& h : held_) {
    LoopWake(h.loop, h.unit);  // Queued, the unit holds the task itself.
    Py_DECREF(h.task);
  }
}

bool HeldFirstSteps::Hold(PyObject* loop, PyObject* task, task::Task* unit) {
  HeldFirstSteps* scope = held_first_steps;
  if (scope == nullptr) return false;
  scope->held_.push_back({loop, Py_NewRef(task), unit});
  return true;
}

runtime::Runtime& LoopRuntime(PyObject* loop) { return *StateOf(loop)->runtime; }

task::Executor* LoopExecutor(PyObject* loop) {
  auto* strand = runtime::scheduler::Strand::Current();
  if (strand != nullptr && strand->inherits()) return strand;
  return StateOf(loop)->runtime->executor();
}

FdTable& LoopFds(PyObject* loop) { return StateOf(loop)->fds; }

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

void LoopWake(PyObject* loop, task::Task* unit) {
  LoopState* st = StateOf(loop);
  // A unit made without an executor in mind goes where its maker runs; a
  // connection's unit comes bound to its strand already.
  if (unit->executor() == nullptr) unit->set_executor(LoopExecutor(loop));
  if (!st->running_flag.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->running) {
      unit->Ref();
      st->deferred.push_back(unit);
      return;
    }
  }
  unit->Wake();
}

void LoopRegisterTask(PyObject* loop, PyObject* task, TaskLink* link) {
  auto& shard = StateOf(loop)->ShardFor(task);
  link->owner = task;
  std::lock_guard<ShardLock> lock(shard.mu);
  ++shard.registered;
  ++shard.live;
  link->prev = shard.head.prev;
  link->next = &shard.head;
  shard.head.prev->next = link;
  shard.head.prev = link;
}

void LoopUnregisterTask(PyObject* loop, TaskLink* link) {
  auto& shard = StateOf(loop)->ShardFor(link->owner);
  std::lock_guard<ShardLock> lock(shard.mu);
  if (link->next == nullptr) return;  // Not registered.
  --shard.live;
  link->prev->next = link->next;
  link->next->prev = link->prev;
  link->prev = link->next = nullptr;
}

int LoopOverridesCreateTask(PyObject* loop) {
  PyObject* method = PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(loop)),
                                      str_create_task);
  if (method == nullptr) return -1;
  const bool ours = method == create_task_descr;
  Py_DECREF(method);
  return ours ? 0 : 1;
}

PyObject* LoopCreateTaskCore(PyObject* loop, PyObject* coro) {
  PyObject* arg[] = {coro};
  return Loop_create_task(loop, arg, 1, nullptr);
}

bool LoopStartEagerly(PyObject* loop, task::Task* unit) {
  if (!LoopRunsOnThisThread(loop)) return false;
  if (unit->executor() == nullptr) unit->set_executor(LoopExecutor(loop));
  // Claim the unit as if a worker had taken it off a queue, then run its
  // first step here; a wake during the step requeues it as usual.
  if (unit->state().TransitionToScheduled() == task::State::WakeAction::kSubmit) {
    task::RunTask(unit);
  }
  return true;
}

bool LoopDeferIfStopped(PyObject* loop, task::Task* unit) {
  LoopState* st = StateOf(loop);
  if (st->running_flag.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->running) return false;
  if (st->closed) {
    // Nothing of a closed loop runs again: the unit takes its cancel path
    // once this poll returns, instead of waiting in a list nobody drains.
    unit->Cancel();
    return true;
  }
  unit->Ref();
  st->deferred.push_back(unit);
  return true;
}

namespace {
thread_local PyObject* worker_running_loop = nullptr;  // Identity only.
}  // namespace

SlowCallbackCheck::SlowCallbackCheck(PyObject* loop) : loop_(loop) {
  if (StateOf(loop)->debug.load(std::memory_order_relaxed)) {
    start_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    Clock::now().time_since_epoch())
                    .count();
  }
}

void SlowCallbackCheck::Done(PyObject* what) {
  if (start_ns_ < 0) return;
  const std::int64_t took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count() -
      start_ns_;
  if (took < StateOf(loop_)->slow_callback_ns.load(std::memory_order_relaxed)) return;
  StateOf(loop_)->slow_steps.fetch_add(1, std::memory_order_relaxed);
  // stdlib's words, through asyncio's logger, so log filters written for
  // stdlib catch ours.
  PyObject* saved = PyErr_GetRaisedException();
  PyObject* res = PyObject_CallMethod(asyncio_logger, "warning", "sOd",
                                      "Executing %s took %.3f seconds", what,
                                      static_cast<double>(took) / 1e9);
  if (res == nullptr) PyErr_WriteUnraisable(loop_);
  Py_XDECREF(res);
  PyErr_SetRaisedException(saved);
}

bool LoopRunsOnThisThread(PyObject* loop) {
  return worker_running_loop == loop &&
         StateOf(loop)->running_flag.load(std::memory_order_acquire);
}

bool LoopRunsOnlyOnThisThread(PyObject* loop) {
  return LoopRunsOnThisThread(loop) &&
         StateOf(loop)->runtime->scheduler().target_workers() == 1;
}

// sys.set_asyncgen_hooks is per thread: stdlib sets it on the one thread
// that runs the loop, so here every worker sets it to the loop whose steps
// it runs. Without it async generators first iterated in a step would be
// unknown to shutdown_asyncgens() and closed by the garbage collector with
// no chance to await in their `finally`.
int InstallAsyncgenHooks(PyObject* loop) {
  PyObject* firstiter = nullptr;
  PyObject* finalizer = nullptr;
  if (PyObject_GetOptionalAttr(loop, str_asyncgen_firstiter_hook, &firstiter) < 0 ||
      PyObject_GetOptionalAttr(loop, str_asyncgen_finalizer_hook, &finalizer) < 0) {
    Py_XDECREF(firstiter);
    return -1;
  }
  int rc = 0;
  if (firstiter != nullptr && finalizer != nullptr) {  // A bare core Loop has none.
    PyObject* kwargs = Py_BuildValue("{sOsO}", "firstiter", firstiter, "finalizer",
                                     finalizer);
    PyObject* empty = PyTuple_New(0);
    PyObject* res = kwargs != nullptr && empty != nullptr
                        ? PyObject_Call(set_asyncgen_hooks, empty, kwargs)
                        : nullptr;
    if (res == nullptr) rc = -1;
    Py_XDECREF(res);
    Py_XDECREF(empty);
    Py_XDECREF(kwargs);
  }
  Py_XDECREF(firstiter);
  Py_XDECREF(finalizer);
  return rc;
}

// Whether this worker tracks coroutine origins (sys.set_coroutine_origin_
// tracking_depth is per thread): on while it runs a loop in debug mode, as
// stdlib's run_forever() turns it on for its thread.
thread_local bool worker_tracks_origins = false;
constexpr int kDebugStackDepth = 10;  // asyncio.constants.DEBUG_STACK_DEPTH

int SyncOriginTracking(PyObject* loop) {
  const bool want = StateOf(loop)->debug.load(std::memory_order_relaxed);
  if (want == worker_tracks_origins) return 0;
  PyObject* res = PyObject_CallFunction(set_origin_tracking_depth, "i",
                                        want ? kDebugStackDepth : 0);
  if (res == nullptr) return -1;
  Py_DECREF(res);
  worker_tracks_origins = want;
  return 0;
}

int LoopEnterOnWorker(PyObject* loop) {
  if (SyncOriginTracking(loop) < 0) return -1;
  if (worker_running_loop == loop) return 0;
  PyObject* res = PyObject_CallOneArg(set_running_loop, loop);
  if (res == nullptr) return -1;
  Py_DECREF(res);
  if (InstallAsyncgenHooks(loop) < 0) return -1;
  worker_running_loop = loop;
  return 0;
}

void LoopReportException(PyObject* loop, const char* message_prefix,
                         PyObject* what, PyObject* extra_key,
                         PyObject* extra_value) {
  PyObject* exc = PyErr_GetRaisedException();
  PyObject* context = PyDict_New();
  PyObject* message =
      PyUnicode_FromFormat("%s%R", message_prefix, what != nullptr ? what : Py_None);
  bool ok = context != nullptr && message != nullptr &&
            PyDict_SetItemString(context, "message", message) == 0 &&
            (exc == nullptr || PyDict_SetItemString(context, "exception", exc) == 0) &&
            (what == nullptr ||
             PyDict_SetItemString(context, "handle", what) == 0) &&
            (extra_key == nullptr ||
             PyDict_SetItem(context, extra_key, extra_value) == 0);
  if (ok) {
    PyObject* res = PyObject_CallMethodOneArg(loop, str_call_exception_handler,
                                              context);
    if (res == nullptr) {
      PyErr_WriteUnraisable(loop);
    } else {
      Py_DECREF(res);
    }
  } else {
    PyErr_WriteUnraisable(loop);
  }
  Py_XDECREF(message);
  Py_XDECREF(context);
  Py_XDECREF(exc);
}

int RegisterLoopTypes(PyObject* module) {
  str_call_exception_handler = PyUnicode_InternFromString("call_exception_handler");
  PyObject* events = PyImport_ImportModule("asyncio.events");
  PyObject* coroutines = PyImport_ImportModule("asyncio.coroutines");
  if (events == nullptr || coroutines == nullptr) {
    Py_XDECREF(events);
    Py_XDECREF(coroutines);
    return -1;
  }
  set_running_loop = PyObject_GetAttrString(events, "_set_running_loop");
  PyObject* log = PyImport_ImportModule("asyncio.log");
  if (log == nullptr) {
    Py_DECREF(events);
    Py_DECREF(coroutines);
    return -1;
  }
  asyncio_logger = PyObject_GetAttrString(log, "logger");
  Py_DECREF(log);
  set_asyncgen_hooks = PySys_GetObject("set_asyncgen_hooks");  // Borrowed.
  Py_XINCREF(set_asyncgen_hooks);
  set_origin_tracking_depth = PySys_GetObject("set_coroutine_origin_tracking_depth");
  Py_XINCREF(set_origin_tracking_depth);
  str_asyncgen_firstiter_hook = PyUnicode_InternFromString("_asyncgen_firstiter_hook");
  str_asyncgen_finalizer_hook = PyUnicode_InternFromString("_asyncgen_finalizer_hook");
  PyObject* helpers = PyImport_ImportModule("asyncio.format_helpers");
  if (helpers != nullptr) {
    format_callback_source = PyObject_GetAttrString(helpers, "_format_callback_source");
    Py_DECREF(helpers);
  }
  iscoroutine = PyObject_GetAttrString(coroutines, "iscoroutine");
  // 3.14 renamed the internal check (the public one is deprecated there).
  if (PyObject_GetOptionalAttrString(coroutines, "_iscoroutinefunction",
                                     &iscoroutinefunction) == 0) {
    iscoroutinefunction = PyObject_GetAttrString(coroutines, "iscoroutinefunction");
  }
  Py_DECREF(events);
  Py_DECREF(coroutines);
  if (set_running_loop == nullptr || asyncio_logger == nullptr ||
      format_callback_source == nullptr || set_asyncgen_hooks == nullptr ||
      set_origin_tracking_depth == nullptr ||
      str_asyncgen_firstiter_hook == nullptr || str_asyncgen_finalizer_hook == nullptr ||
      iscoroutine == nullptr ||
      iscoroutinefunction == nullptr) {
    return -1;
  }
  loop_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &loop_spec, nullptr));
  if (loop_type == nullptr) return -1;
  str_create_task = PyUnicode_InternFromString("create_task");
  create_task_descr = PyObject_GetAttr(reinterpret_cast<PyObject*>(loop_type),
                                       str_create_task);
  if (create_task_descr == nullptr) return -1;
  handle_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &handle_spec, nullptr));
  if (handle_type == nullptr) return -1;
  timer_handle_type = reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(
      module, &timer_handle_spec, reinterpret_cast<PyObject*>(handle_type)));
  if (timer_handle_type == nullptr) return -1;
  FutureHooks hooks = GetFutureHooks();
  hooks.schedule_batch = ScheduleBatch;
  SetFutureHooks(hooks);
  if (PyModule_AddObjectRef(module, "Loop", reinterpret_cast<PyObject*>(loop_type)) < 0 ||
      PyModule_AddObjectRef(module, "Handle", reinterpret_cast<PyObject*>(handle_type)) < 0 ||
      PyModule_AddObjectRef(module, "TimerHandle",
                            reinterpret_cast<PyObject*>(timer_handle_type)) < 0) {
    return -1;
  }
  return 0;
}

}  // namespace mt::pyext
