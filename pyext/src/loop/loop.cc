// The Loop type and what runs a loop: scheduling callbacks (call_soon,
// call_later; the handles themselves are handle.cc's), running and
// stopping, the deferred list of a stopped loop, entering a loop on a
// worker, debug mode and exception reporting. Task creation and the task
// registry are loop_tasks.cc's, done-callback batches callback_batch.cc's,
// the blocking-pool bridge loop_blocking.cc's.

#include "pyext/src/loop/loop.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "pyext/src/common/kwargs.h"
#include "pyext/src/common/runtime_holder.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop_state.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/strand.h"

namespace mt::pyext {

namespace {

PyTypeObject* loop_type = nullptr;

// The longest close() waits for the workers that ran the loop to let go
// of it: parked ones do at once when woken; a busy one when it next parks
// or enters another loop's unit.
constexpr std::chrono::milliseconds kLetGoWait{500};

PyObject* str_call_exception_handler = nullptr;
PyObject* asyncio_logger = nullptr;  // asyncio.log.logger
PyObject* set_asyncgen_hooks = nullptr;      // sys.set_asyncgen_hooks
PyObject* str_asyncgen_firstiter_hook = nullptr;
PyObject* str_asyncgen_finalizer_hook = nullptr;
PyObject* set_running_loop = nullptr;  // asyncio.events._set_running_loop
PyObject* set_origin_tracking_depth = nullptr;  // sys.set_coroutine_origin_tracking_depth
PyObject* iscoroutine = nullptr;       // asyncio.coroutines.iscoroutine
PyObject* iscoroutinefunction = nullptr;
PyObject* extract_stack = nullptr;  // asyncio.format_helpers.extract_stack

}  // namespace

namespace loop_internal {

double NowSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

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

}  // namespace loop_internal

using loop_internal::Clock;
using loop_internal::LoopObject;
using loop_internal::LoopState;
using loop_internal::StateOf;
namespace task = runtime::task;

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

namespace loop_internal {
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
  PyObject* handle = ScheduleSoon(self, call.callback, call.args, call.context);
  Py_DECREF(call.args);
  Py_DECREF(call.context);
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

PyObject* ScheduleTimer(PyObject* self, double when, CallArgs& call, bool when_is_int = false) {
  PyObject* handle = ScheduleAt(self, when, call.callback, call.args, call.context, when_is_int);
  Py_DECREF(call.args);
  Py_DECREF(call.context);
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
  return ScheduleTimer(self, when, call, PyLong_CheckExact(args[0]));
}

PyObject* Loop_time(PyObject*, PyObject*) { return PyFloat_FromDouble(NowSeconds()); }

// Runs the loop until stop(): the calling thread only waits (detached, so
// it never holds up the workers), waking every 50 ms to let signal
// handlers (Ctrl-C) run.
// Runs what the workers handed to the runner thread (_call_in_runner).
void RunRunnerCalls(std::vector<PyObject*>& calls) {
  for (PyObject* fn : calls) {
    PyObject* res = PyObject_CallNoArgs(fn);
    if (res == nullptr) PyErr_WriteUnraisable(fn);
    Py_XDECREF(res);
    Py_DECREF(fn);
  }
  calls.clear();
}

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
    st->home_ident.store(PyThread_get_thread_ident(), std::memory_order_release);
    st->running_flag.store(true, std::memory_order_release);
    release.swap(st->deferred);
  }
  for (task::Task* unit : release) {
    unit->Wake();
    unit->Unref();
  }
  PyObject* error = nullptr;  // Set only with the loop's mutex held.
  std::vector<PyObject*> calls;
  while (true) {
    bool stop = false;
    Py_BEGIN_ALLOW_THREADS;
    {
      // The mutex must be released before re-attaching: a worker holding
      // the GIL (GIL builds) may be waiting for it in stop().
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait_for(lock, std::chrono::milliseconds(50), [st] {
        return st->stop_requested || st->runner_exc != nullptr ||
               !st->runner_calls.empty();
      });
      stop = st->stop_requested;
      error = std::exchange(st->runner_exc, nullptr);
      calls.swap(st->runner_calls);
    }
    Py_END_ALLOW_THREADS;
    RunRunnerCalls(calls);
    if (error != nullptr || stop) break;
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
    st->exit_pending.store(false, std::memory_order_release);
    st->stop_requested = false;
    st->running_flag.store(false, std::memory_order_release);
    st->home_ident.store(0, std::memory_order_release);
    calls.swap(st->runner_calls);  // None can be added now.
  }
  // A worker waiting for one of these must not wait forever.
  RunRunnerCalls(calls);
  if (error != nullptr) {
    PyErr_SetRaisedException(error);
    return nullptr;
  }
  Py_RETURN_NONE;
}

// _call_in_runner(fn): fn() on the thread in run_forever(), soon; the
// caller waits for its outcome if it needs one. RuntimeError if the loop
// is not running.
PyObject* Loop_call_in_runner(PyObject* self, PyObject* fn) {
  LoopState* st = StateOf(self);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->running) {
      PyErr_SetString(PyExc_RuntimeError, "the event loop is not running");
      return nullptr;
    }
    st->runner_calls.push_back(Py_NewRef(fn));
  }
  st->cv.notify_all();
  Py_RETURN_NONE;
}

void RaiseInRunner(LoopState* st, PyObject* exc) {
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->runner_exc == nullptr) {
      st->runner_exc = exc;
      exc = nullptr;
    }
    st->exit_pending.store(true, std::memory_order_release);
  }
  st->cv.notify_all();
  // A second one while the first is still on its way: stdlib would have
  // stopped at the first, so this one is not raised either. (Callers are
  // attached threads.)
  Py_XDECREF(exc);
}

void RequestStop(LoopState* st) {
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->stop_requested = true;
  }
  st->cv.notify_all();
}

PyObject* Loop_stop(PyObject* self, PyObject*) {
  if (!StopAfterCallback::Defer(self)) RequestStop(StateOf(self));
  Py_RETURN_NONE;
}

PyObject* Loop_close_core(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::vector<task::Task*> dropped;
  PyObject* unraised = nullptr;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->running) {
      PyErr_SetString(PyExc_RuntimeError, "Cannot close a running event loop");
      return nullptr;
    }
    st->closed = true;
    st->closed_flag.store(true, std::memory_order_release);
    dropped.swap(st->deferred);
    unraised = std::exchange(st->runner_exc, nullptr);
  }
  Py_XDECREF(unraised);
  // Work that never got to run: its cancel path releases what it holds.
  for (task::Task* unit : dropped) {
    unit->Cancel();
    unit->Unref();
  }
  // A closed selector loop forgets its readers and writers; transports
  // still open are closed.
  FdTableCloseAll(self);
  // Idle workers that ran this loop let go of it too
  // (ForgetClosedLoopOnThisWorker runs before each park), and the caller
  // waits for them (bounded): code that drops the loop after close()
  // expects it freed, as on stdlib. A worker never waits (it may be the
  // one the others need).
  st->runtime->scheduler().RerunParkHooks();
  if (!RuntimeHolder::Instance().IsWorkerThread()) {
    std::shared_ptr<std::atomic<int>> holders = st->worker_holders;
    const auto deadline = Clock::now() + kLetGoWait;
    Py_BEGIN_ALLOW_THREADS;
    while (holders->load(std::memory_order_acquire) > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    Py_END_ALLOW_THREADS;
    // A worker still finishing a step when the rerun above reached the
    // others (a gather() child whose done callback woke the main task,
    // then let go of the outer future: the last reference, dropping the
    // children list another worker made) hands those objects to their
    // maker, which already looked and parked: free-threaded CPython
    // queues them there until that thread next runs Python code (50,000
    // finished tasks kept, about 1 run in 300 under load,
    // garbage_test). Its let-go above says the step is over: one more
    // rerun has the parked workers free what it queued.
    st->runtime->scheduler().RerunParkHooks();
  }
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

PyObject* Loop_deferred_count(PyObject* self, PyObject*) {
  LoopState* st = StateOf(self);
  std::lock_guard<std::mutex> lock(st->mu);
  return PyLong_FromSize_t(st->deferred.size());
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
    Py_XDECREF(loop->st->runner_exc);
    for (auto* strand : loop->st->serial_strands) strand->Unref();
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

#define FASTCALL_KW(fn) \
  reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn))

PyMethodDef loop_methods[] = {
    {"call_soon", FASTCALL_KW(Loop_call_soon), METH_FASTCALL | METH_KEYWORDS,
     "call_soon($self, callback, /, *args, context=None)\n--\n\n"
     "Run callback(*args) on a worker as soon as possible."},
    {"call_soon_threadsafe", FASTCALL_KW(Loop_call_soon_threadsafe),
     METH_FASTCALL | METH_KEYWORDS, "call_soon_threadsafe($self, callback, /, *args, context=None)\n--\n\n"
     "Same as call_soon: every method is thread-safe."},
    {"call_later", FASTCALL_KW(Loop_call_later), METH_FASTCALL | METH_KEYWORDS,
     "call_later($self, delay, callback, /, *args, context=None)\n--\n\n"
     "Run callback(*args) after delay seconds."},
    {"call_at", FASTCALL_KW(Loop_call_at), METH_FASTCALL | METH_KEYWORDS,
     "call_at($self, when, callback, /, *args, context=None)\n--\n\n"
     "Run callback(*args) at loop time `when`."},
    {"time", Loop_time, METH_NOARGS, "time($self, /)\n--\n\nThe loop's clock (time.monotonic())."},
    {"stop", Loop_stop, METH_NOARGS, "stop($self, /)\n--\n\nMake run_forever() return."},
    {"is_running", Loop_is_running, METH_NOARGS, "is_running($self, /)\n--\n\nTrue while run_forever runs."},
    {"is_closed", Loop_is_closed, METH_NOARGS, "is_closed($self, /)\n--\n\nTrue once closed."},
    {"_run_until_stopped", Loop_run_until_stopped, METH_NOARGS,
     "Let the workers run this loop's work until stop()."},
    {"_call_in_runner", Loop_call_in_runner, METH_O,
     "Run fn() soon on the thread in run_forever() (for what only the main "
     "thread may do)."},
    {"_close_core", Loop_close_core, METH_NOARGS,
     "Refuse new work and cancel what never ran."},
    {"_set_core_debug", Loop_set_core_debug, METH_O,
     "Check callbacks when they are scheduled (debug mode)."},
    {"_run_blocking",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Loop_run_blocking)),
     METH_FASTCALL, "Run func(*args) on the runtime's blocking pool into a future."},
    {"_blocking_jobs", Loop_blocking_jobs, METH_NOARGS,
     "How many of this loop's blocking-pool jobs are not over yet."},
    {"create_future", Loop_create_future, METH_NOARGS,
     "create_future($self, /)\n--\n\nA new Future attached to this loop."},
    {"create_task", FASTCALL_KW(Loop_create_task), METH_FASTCALL | METH_KEYWORDS,
     "create_task($self, coro, /, **kwargs)\n--\n\n"
     "Wrap a coroutine in a Task scheduled on this loop."},
    {"set_task_factory", Loop_set_task_factory, METH_O,
     "set_task_factory($self, factory, /)\n--\n\n"
     "Use factory(loop, coro, **kwargs) for create_task (None: the default)."},
    {"get_task_factory", Loop_get_task_factory, METH_NOARGS,
     "get_task_factory($self, /)\n--\n\nThe task factory, or None."},
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
}  // namespace loop_internal

bool IsLoop(PyObject* obj) {
  return loop_type != nullptr && PyObject_TypeCheck(obj, loop_type);
}

runtime::Runtime& LoopRuntime(PyObject* loop) { return *StateOf(loop)->runtime; }

namespace {
// The loop whose unit this worker polls now (set as each poll enters its
// loop); nullptr on threads that are not workers. Identity only.
thread_local PyObject* worker_running_loop = nullptr;

// This thread's count in the worker_holders of worker_running_loop, given
// back when it lets go of the loop (or when the thread ends, after its
// thread state, holding the loop, was cleared).
class WorkerLoopHold {
 public:
  ~WorkerLoopHold() { Release(); }
  void Set(std::shared_ptr<std::atomic<int>> holders) {
    Release();
    holders_ = std::move(holders);
    holders_->fetch_add(1, std::memory_order_relaxed);
  }
  void Release() {
    if (holders_ == nullptr) return;
    holders_->fetch_sub(1, std::memory_order_release);
    holders_.reset();
  }

 private:
  std::shared_ptr<std::atomic<int>> holders_;
};
thread_local WorkerLoopHold worker_loop_hold;

// Whether the calling thread is a worker running another loop's unit:
// what it schedules for `loop` is foreign to it (see kRemote).
bool ForeignToThisWorker(PyObject* loop) {
  return worker_running_loop != nullptr && worker_running_loop != loop;
}
}  // namespace

task::Executor* LoopExecutor(PyObject* loop) {
  auto* strand = runtime::scheduler::Strand::Current();
  // A connection's strand is its own loop's: another loop's work made in
  // one of its callbacks is not serialized with it.
  if (strand != nullptr && strand->inherits() && !ForeignToThisWorker(loop)) return strand;
  LoopState* st = StateOf(loop);
  if (auto* serial = st->serial_strand.load(std::memory_order_acquire)) return serial;
  return st->runtime->executor();
}

runtime::scheduler::Strand* LoopSerialStrand(PyObject* loop) {
  using runtime::scheduler::Strand;
  LoopState* st = StateOf(loop);
  std::lock_guard<std::mutex> lock(st->mu);
  Strand* strand = st->serial_strand.load(std::memory_order_acquire);
  if (strand == nullptr) {
    strand = Strand::Create(st->runtime->executor());
    ClaimForLoop(loop, strand);
    st->serial_strands.push_back(strand);  // The loop's reference.
    st->serial_strand.store(strand, std::memory_order_release);
  }
  strand->Ref();
  return strand;
}

FdTable& LoopFds(PyObject* loop) { return StateOf(loop)->fds; }

void LoopWake(PyObject* loop, task::Task* unit) {
  LoopState* st = StateOf(loop);
  // A unit made without an executor in mind goes where its maker runs; a
  // connection's unit comes bound to its strand already.
  if (unit->executor() == nullptr) unit->set_executor(LoopExecutor(loop));
  if (unit->domain() == 0) ClaimForLoop(loop, unit);
  if (!st->running_flag.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->running) {
      unit->Ref();
      st->deferred.push_back(unit);
      return;
    }
  }
  // call_soon_threadsafe (run_coroutine_threadsafe) from a step of another
  // loop, whose caller may then block on the outcome: not this worker's
  // own queue, which it would not get back to.
  unit->Wake(ForeignToThisWorker(loop) ? task::ScheduleKind::kRemote
                                       : task::ScheduleKind::kWake);
}

bool LoopDeferIfStopped(PyObject* loop, task::Task* unit) {
  LoopState* st = StateOf(loop);
  if (st->running_flag.load(std::memory_order_acquire) &&
      !st->exit_pending.load(std::memory_order_acquire)) {
    return false;
  }
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->running && !st->exit_pending.load(std::memory_order_relaxed)) return false;
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
thread_local StopAfterCallback* innermost_callback = nullptr;
}  // namespace

StopAfterCallback::StopAfterCallback(PyObject* loop)
    : loop_(loop), outer_(innermost_callback) {
  innermost_callback = this;
}

StopAfterCallback::~StopAfterCallback() {
  innermost_callback = outer_;
  if (stop_requested_) loop_internal::RequestStop(StateOf(loop_));
}

bool StopAfterCallback::Defer(PyObject* loop) {
  for (StopAfterCallback* s = innermost_callback; s != nullptr; s = s->outer_) {
    if (s->loop_ == loop) {
      s->stop_requested_ = true;
      return true;
    }
  }
  return false;
}

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

PyObject* LoopOfThisWorker() { return worker_running_loop; }

void ForgetLoopOfThisWorker() {
  worker_running_loop = nullptr;
  worker_loop_hold.Release();
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
namespace {

// sys.set_asyncgen_hooks(firstiter=..., finalizer=...) for this thread.
int SetAsyncgenHooks(PyObject* firstiter, PyObject* finalizer) {
  PyObject* kwargs = Py_BuildValue("{sOsO}", "firstiter", firstiter, "finalizer", finalizer);
  PyObject* empty = PyTuple_New(0);
  PyObject* res = kwargs != nullptr && empty != nullptr
                      ? PyObject_Call(set_asyncgen_hooks, empty, kwargs)
                      : nullptr;
  Py_XDECREF(empty);
  Py_XDECREF(kwargs);
  if (res == nullptr) return -1;
  Py_DECREF(res);
  return 0;
}

}  // namespace

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
    rc = SetAsyncgenHooks(firstiter, finalizer);
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
  // The previous loop's references were replaced just above.
  worker_loop_hold.Set(StateOf(loop)->worker_holders);
  return 0;
}

namespace {

// Before a worker parks (RuntimeHolder::SetBeforePark): a closed loop it
// last ran is let go of. The worker's running loop and asyncgen hooks (its
// bound methods) are references the thread holds, which kept the last
// loop of asyncio.run() alive for good. (While the thread holds them, the
// loop is alive, so its state may be read.) A closing loop has parked
// workers run this too (Scheduler::RerunParkHooks).
void ForgetClosedLoopOnThisWorker() {
  PyObject* loop = worker_running_loop;
  if (loop == nullptr || !StateOf(loop)->closed_flag.load(std::memory_order_acquire)) return;
  worker_running_loop = nullptr;
  PyObject* pending = PyErr_GetRaisedException();
  if (SetAsyncgenHooks(Py_None, Py_None) < 0) PyErr_WriteUnraisable(nullptr);
  // Last: this may drop the loop's last reference.
  PyObject* res = PyObject_CallOneArg(set_running_loop, Py_None);
  if (res == nullptr) PyErr_WriteUnraisable(nullptr);
  Py_XDECREF(res);
  worker_loop_hold.Release();
  PyErr_SetRaisedException(pending);
}

}  // namespace

PyObject* LoopSourceTraceback(PyObject* loop) {
  if (!IsLoop(loop) || !StateOf(loop)->debug.load(std::memory_order_relaxed)) return nullptr;
  PyFrameObject* frame = PyEval_GetFrame();  // Borrowed; none from a bare C call.
  if (frame == nullptr) return nullptr;
  PyObject* saved = PyErr_GetRaisedException();
  PyObject* stack = PyObject_CallOneArg(extract_stack, reinterpret_cast<PyObject*>(frame));
  if (stack == nullptr) PyErr_Clear();
  PyErr_SetRaisedException(saved);
  return stack;
}

bool IsExitException(PyObject* exc) {
  return exc != nullptr && (PyErr_GivenExceptionMatches(exc, PyExc_SystemExit) ||
                            PyErr_GivenExceptionMatches(exc, PyExc_KeyboardInterrupt));
}

void LoopRaiseInRunner(PyObject* loop, PyObject* exc) {
  loop_internal::RaiseInRunner(StateOf(loop), exc);
}

void LoopReportException(PyObject* loop, const char* message_prefix,
                         PyObject* what, PyObject* extra_key,
                         PyObject* extra_value) {
  PyObject* exc = PyErr_GetRaisedException();
  if (IsExitException(exc)) {
    LoopRaiseInRunner(loop, exc);
    return;
  }
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
      // A handler that raises SystemExit stops the loop, as in stdlib.
      PyObject* handler_exc = PyErr_GetRaisedException();
      if (IsExitException(handler_exc)) {
        LoopRaiseInRunner(loop, handler_exc);
      } else {
        PyErr_SetRaisedException(handler_exc);
        PyErr_WriteUnraisable(loop);
      }
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
  iscoroutine = PyObject_GetAttrString(coroutines, "iscoroutine");
  // 3.14 renamed the internal check (the public one is deprecated there).
  if (PyObject_GetOptionalAttrString(coroutines, "_iscoroutinefunction",
                                     &iscoroutinefunction) == 0) {
    iscoroutinefunction = PyObject_GetAttrString(coroutines, "iscoroutinefunction");
  }
  Py_DECREF(events);
  Py_DECREF(coroutines);
  PyObject* format_helpers = PyImport_ImportModule("asyncio.format_helpers");
  if (format_helpers == nullptr) return -1;
  extract_stack = PyObject_GetAttrString(format_helpers, "extract_stack");
  Py_DECREF(format_helpers);
  if (set_running_loop == nullptr || asyncio_logger == nullptr || extract_stack == nullptr ||
      set_asyncgen_hooks == nullptr ||
      set_origin_tracking_depth == nullptr ||
      str_asyncgen_firstiter_hook == nullptr || str_asyncgen_finalizer_hook == nullptr ||
      iscoroutine == nullptr ||
      iscoroutinefunction == nullptr) {
    return -1;
  }
  loop_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &loop_internal::loop_spec, nullptr));
  if (loop_type == nullptr) return -1;
  if (loop_internal::InitTaskCreation(loop_type) < 0 ||
      loop_internal::RegisterHandleTypes(module) < 0) {
    return -1;
  }
  if (RegisterLoopThreadIdentity(module) < 0) return -1;
  RuntimeHolder::SetBeforePark(ForgetClosedLoopOnThisWorker);
  FutureHooks hooks = GetFutureHooks();
  hooks.schedule_batch = loop_internal::ScheduleBatch;
  hooks.source_traceback = LoopSourceTraceback;
  SetFutureHooks(hooks);
  return PyModule_AddObjectRef(module, "Loop", reinterpret_cast<PyObject*>(loop_type));
}

}  // namespace mt::pyext
