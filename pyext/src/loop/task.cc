// mt_asyncio._core.Task as Python sees it: creation (Task(), TaskCreate
// for the loop), cancel() and the cancellation count, names, stacks and
// repr read safely while another worker may be stepping the task, and the
// control plane's per-task figures. The steps themselves are
// task_step.cc's.

#include "pyext/src/loop/task.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/common/runtime_holder.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/task_object.h"
#include "runtime/metrics/cycle_clock.h"
#include "runtime/task/blocked_sequence.h"
#include "runtime/task/task.h"

namespace mt::pyext {
namespace {

namespace rt_task = runtime::task;
using task_internal::AsTask;
using task_internal::CancelWaiter;
using task_internal::TaskObject;
using task_internal::TaskUnit;
using task_internal::WakeTask;

PyTypeObject* task_type = nullptr;
// The numbers of default task names ("Task-N"), handed to each thread in
// blocks of 64: one shared counter was a cache line that every worker's
// create_task wrote. Numbers stay unique, and increase in creation order
// on each thread (as CPython's test_asyncio checks); across threads they
// follow no order, as tasks created in parallel have none.
struct TaskNumbers;
std::uint64_t NextTaskNumber() {
  return rt_task::NextInSequence<TaskNumbers, 64>();
}

PyObject* task_repr = nullptr;   // asyncio.base_tasks._task_repr
// mt_asyncio.tasks._running_task_repr: the repr of a task that another
// worker is stepping, without reading its frames.
PyObject* running_task_repr = nullptr;
PyObject* task_get_stack = nullptr;
PyObject* task_print_stack = nullptr;
PyObject* get_event_loop = nullptr;
PyObject* iscoroutine = nullptr;
PyObject* str_loop = nullptr;
PyObject* stdlib_task_type = nullptr;  // _asyncio.Task

// Initializes a freshly allocated task and schedules (or eagerly starts)
// its first step. 0, or -1 with an error.
int TaskInitialize(PyObject* self, PyObject* coro, PyObject* loop, PyObject* name,
                   PyObject* context, bool eager_start) {
  TaskObject* t = AsTask(self);
  if (t->unit != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "Task is already initialized");
    return -1;
  }
  // Native coroutines need no Python call; anything else asks asyncio.
  int ok = 1;
  if (!PyCoro_CheckExact(coro)) {
    PyObject* is_coro = PyObject_CallOneArg(iscoroutine, coro);
    if (is_coro == nullptr) return -1;
    ok = PyObject_IsTrue(is_coro);
    Py_DECREF(is_coro);
  }
  if (ok <= 0) {
    if (ok == 0) PyErr_Format(PyExc_TypeError, "a coroutine was expected, got %R", coro);
    return -1;
  }
  PyObject* resolved =
      loop == Py_None ? PyObject_CallNoArgs(get_event_loop) : Py_NewRef(loop);
  if (resolved == nullptr) return -1;
  if (!IsLoop(resolved)) {
    PyErr_Format(PyExc_TypeError,
                 "mt_asyncio tasks run on an mt_asyncio loop, got %R", resolved);
    Py_DECREF(resolved);
    return -1;
  }
  if (LoopCheckRuntime(resolved) < 0) {
    Py_DECREF(resolved);
    return -1;
  }
  Py_XSETREF(t->base.loop, resolved);
  Py_XSETREF(t->base.source_traceback, LoopSourceTraceback(resolved));
  t->coro = Py_NewRef(coro);
  t->context = context == Py_None ? PyContext_CopyCurrent() : Py_NewRef(context);
  if (t->context == nullptr) return -1;
  t->number = NextTaskNumber();
  if (name != Py_None) {
    t->name = PyObject_Str(name);
    if (t->name == nullptr) return -1;
  }
  t->unit = new TaskUnit(resolved, self, LoopRunsOnlyOnThisThread(resolved));
  if (t->unit == nullptr) {
    PyErr_NoMemory();
    return -1;
  }
  LoopRegisterTask(resolved, self, &t->registry_link);
  if (eager_start && LoopStartEagerly(resolved, t->unit)) {
    // Done in its first step: nothing will step it again (stdlib drops
    // the coroutine here too).
    if (FutureIsDone(&t->base)) Py_CLEAR(t->coro);
    return 0;
  }
  if (!HeldFirstSteps::Hold(resolved, self, t->unit)) LoopWake(resolved, t->unit);
  return 0;
}

int Task_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"coro", "loop", "name", "context", "eager_start",
                                 nullptr};
  PyObject* coro;
  PyObject* loop = Py_None;
  PyObject* name = Py_None;
  PyObject* context = Py_None;
  PyObject* eager_start = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOOO:Task",
                                   const_cast<char**>(kwlist), &coro, &loop,
                                   &name, &context, &eager_start)) {
    return -1;
  }
  const int eager = PyObject_IsTrue(eager_start);
  if (eager < 0) return -1;
  return TaskInitialize(self, coro, loop, name, context, eager != 0);
}

// Task(coro, loop=L) with a loop that is not ours (a stdlib loop someone
// made explicitly while compat.install() points asyncio.Task here) makes
// stdlib's Task, which is what that loop runs. Subclasses are left alone.
PyObject* Task_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (type == task_type && kwargs != nullptr) {
    PyObject* loop = nullptr;
    if (PyDict_GetItemRef(kwargs, str_loop, &loop) < 0) return nullptr;
    const bool foreign = loop != nullptr && loop != Py_None && !IsLoop(loop);
    Py_XDECREF(loop);
    if (foreign) return PyObject_Call(stdlib_task_type, args, kwargs);
  }
  return FutureType()->tp_new(type, args, kwargs);
}

int Task_traverse(PyObject* self, visitproc visit, void* arg) {
  TaskObject* t = AsTask(self);
  Py_VISIT(t->coro);
  Py_VISIT(t->context);
  Py_VISIT(t->name);
  Py_VISIT(t->fut_waiter);
  Py_VISIT(t->must_cancel_msg);
  Py_VISIT(t->step_exc);
  return FutureType()->tp_traverse(self, visit, arg);
}

int Task_clear(PyObject* self) {
  TaskObject* t = AsTask(self);
  Py_CLEAR(t->coro);
  Py_CLEAR(t->context);
  Py_CLEAR(t->name);
  Py_CLEAR(t->fut_waiter);
  Py_CLEAR(t->must_cancel_msg);
  Py_CLEAR(t->step_exc);
  return FutureType()->tp_clear(self);
}

void Task_dealloc(PyObject* self) {
  TaskObject* t = AsTask(self);
  PyObject_GC_UnTrack(self);
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return;
  if (t->unit != nullptr) {
    t->unit->Unref();
    t->unit = nullptr;
  }
  PyObject_GC_Track(self);  // The base dealloc untracks again.
  Task_clear(self);
  FutureType()->tp_dealloc(self);
}

PyObject* Task_cancel(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"msg", nullptr};
  PyObject* msg = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:cancel",
                                   const_cast<char**>(kwlist), &msg)) {
    return nullptr;
  }
  TaskObject* t = AsTask(self);
  bool first = true;
  while (true) {
    bool done = false;
    PyObject* waiter = nullptr;
    Py_BEGIN_CRITICAL_SECTION(self);
    done = t->base.state != FutureState::kPending;
    if (!done) {
      if (first) ++t->num_cancels_requested;
      if (t->fut_waiter == nullptr) {
        // Running or about to run: the next step throws CancelledError.
        t->must_cancel = true;
        Py_XSETREF(t->must_cancel_msg, Py_NewRef(msg));
      } else {
        waiter = Py_NewRef(t->fut_waiter);
      }
    }
    Py_END_CRITICAL_SECTION();
    if (done) {
      if (first) Py_RETURN_FALSE;
      Py_RETURN_TRUE;
    }
    first = false;
    if (waiter == nullptr) Py_RETURN_TRUE;
    const int cancelled = CancelWaiter(waiter, msg);
    if (cancelled < 0) {
      Py_DECREF(waiter);
      return nullptr;
    }
    if (cancelled > 0) {
      Py_DECREF(waiter);
      Py_RETURN_TRUE;
    }
    // The waiter was done already: its wakeup is on the way. Make sure the
    // step it triggers cancels, unless the task moved on to a new waiter.
    bool again = false;
    Py_BEGIN_CRITICAL_SECTION(self);
    if (t->fut_waiter == nullptr || t->fut_waiter == waiter) {
      t->must_cancel = true;
      Py_XSETREF(t->must_cancel_msg, Py_NewRef(msg));
    } else {
      again = true;
    }
    Py_END_CRITICAL_SECTION();
    Py_DECREF(waiter);
    if (!again) Py_RETURN_TRUE;
  }
}

PyObject* Task_cancelling(PyObject* self, PyObject*) {
  int n;
  Py_BEGIN_CRITICAL_SECTION(self);
  n = AsTask(self)->num_cancels_requested;
  Py_END_CRITICAL_SECTION();
  return PyLong_FromLong(n);
}

PyObject* Task_uncancel(PyObject* self, PyObject*) {
  TaskObject* t = AsTask(self);
  int n;
  Py_BEGIN_CRITICAL_SECTION(self);
  if (t->num_cancels_requested > 0) {
    --t->num_cancels_requested;
    if (t->num_cancels_requested == 0) t->must_cancel = false;
  }
  n = t->num_cancels_requested;
  Py_END_CRITICAL_SECTION();
  return PyLong_FromLong(n);
}

PyObject* Task_wakeup(PyObject* self, PyObject*) {
  WakeTask(self);
  Py_RETURN_NONE;
}

PyObject* Task_get_coro(PyObject* self, PyObject*) {
  PyObject* c = AsTask(self)->coro;
  return Py_NewRef(c != nullptr ? c : Py_None);
}

PyObject* Task_get_context(PyObject* self, PyObject*) {
  PyObject* c = AsTask(self)->context;
  return Py_NewRef(c != nullptr ? c : Py_None);
}

PyObject* Task_get_name(PyObject* self, PyObject*) {
  TaskObject* t = AsTask(self);
  PyObject* name = nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  if (t->name == nullptr) {
    t->name = PyUnicode_FromFormat("Task-%llu",
                                   static_cast<unsigned long long>(t->number));
  }
  name = Py_XNewRef(t->name);
  Py_END_CRITICAL_SECTION();
  return name;
}

PyObject* Task_set_name(PyObject* self, PyObject* value) {
  PyObject* name = PyObject_Str(value);
  if (name == nullptr) return nullptr;
  Py_BEGIN_CRITICAL_SECTION(self);
  Py_XSETREF(AsTask(self)->name, name);
  Py_END_CRITICAL_SECTION();
  Py_RETURN_NONE;
}

// How long a reader of a task's frames waits for a step on another worker
// to end before it reports the task without them: long enough to outlast a
// worker preempted mid-step on a loaded machine (a task about to suspend),
// short enough for a debugging call to wait out. repr() barely waits: it
// has a form that needs no frame.
constexpr std::chrono::milliseconds kPatienceForStack{250};
constexpr std::chrono::milliseconds kPatienceForRepr{1};

// Calls read() while no worker steps the task: the frames of a coroutine
// that another thread is executing are not safe to read in CPython (its
// generator state has no lock). The caller's own task and a finished one
// need no wait. Returns false without calling read() if the task stayed
// busy on another worker for `patience`.
template <typename Read>
bool WhileNotStepped(PyObject* self, std::chrono::milliseconds patience, Read read) {
  TaskObject* t = AsTask(self);
  rt_task::State* held = nullptr;
  if (self != CurrentTask() && t->unit != nullptr && !FutureIsDone(&t->base)) {
    rt_task::State& state = t->unit->state();
    const auto give_up = std::chrono::steady_clock::now() + patience;
    for (;;) {
      if (state.TryBeginInspection()) {
        held = &state;
        break;
      }
      if (state.Load() & rt_task::State::kComplete) break;  // Finished meanwhile.
      if (std::chrono::steady_clock::now() >= give_up) return false;
      // Detached while waiting: a stop-the-world pause must not wait on us.
      Py_BEGIN_ALLOW_THREADS
      std::this_thread::yield();
      Py_END_ALLOW_THREADS
    }
  }
  read();
  if (held != nullptr) held->EndInspection();
  return true;
}

// A worker that takes an inspected task off a queue waits here, detached,
// so that a stop-the-world pause the inspecting thread joins meanwhile
// (a collection, say) does not wait on the worker forever.
void WaitOutInspection() {
  PyThreadState* ts = PyThreadState_GetUnchecked();
  if (ts != nullptr) PyEval_SaveThread();
  std::this_thread::yield();
  if (ts != nullptr) PyEval_RestoreThread(ts);
}

PyObject* Task_get_stack(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"limit", nullptr};
  PyObject* limit = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:get_stack",
                                   const_cast<char**>(kwlist), &limit)) {
    return nullptr;
  }
  // The task's frames are read while no worker steps it; a task busy on
  // another worker throughout is reported with no frames.
  PyObject* frames = nullptr;
  if (!WhileNotStepped(self, kPatienceForStack, [&] {
        frames = PyObject_CallFunctionObjArgs(task_get_stack, self, limit, nullptr);
      })) {
    return PyList_New(0);
  }
  return frames;
}

PyObject* Task_print_stack(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"limit", "file", nullptr};
  PyObject* limit = Py_None;
  PyObject* file = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OO:print_stack",
                                   const_cast<char**>(kwlist), &limit, &file)) {
    return nullptr;
  }
  return PyObject_CallFunctionObjArgs(task_print_stack, self, limit, file, nullptr);
}

PyObject* Task_set_result(PyObject*, PyObject*) {
  PyErr_SetString(PyExc_RuntimeError, "Task does not support set_result operation");
  return nullptr;
}

PyObject* Task_set_exception(PyObject*, PyObject*) {
  PyErr_SetString(PyExc_RuntimeError,
                  "Task does not support set_exception operation");
  return nullptr;
}

// stdlib's repr reads the coroutine's frame (for "running at file:line"),
// so it runs while no worker steps the task; a task running on another
// worker right now gets `running_task_repr`'s form, which does not.
PyObject* Task_repr(PyObject* self) {
  PyObject* r = nullptr;
  if (WhileNotStepped(self, kPatienceForRepr,
                      [&] { r = PyObject_CallOneArg(task_repr, self); })) {
    return r;
  }
  // Stepped on another worker right now. (Until mt_asyncio.tasks has
  // installed its form, which is before any task of ours can run.)
  PyObject* busy = running_task_repr != nullptr ? running_task_repr : task_repr;
  return PyObject_CallOneArg(busy, self);
}

PyObject* Task_get_must_cancel(PyObject* self, void*) {
  bool v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = AsTask(self)->must_cancel;
  Py_END_CRITICAL_SECTION();
  return PyBool_FromLong(v);
}

PyObject* Task_get_fut_waiter(PyObject* self, void*) {
  PyObject* v;
  Py_BEGIN_CRITICAL_SECTION(self);
  v = Py_XNewRef(AsTask(self)->fut_waiter);
  Py_END_CRITICAL_SECTION();
  return v != nullptr ? v : Py_NewRef(Py_None);
}

PyObject* Task_get_coro_attr(PyObject* self, void*) { return Task_get_coro(self, nullptr); }

// _while_not_stepped(fn, busy): fn() while no worker steps the task, or
// `busy` (fn not called) if it stayed busy on another worker.
PyObject* Task_while_not_stepped(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "_while_not_stepped expected 2 arguments, got %zd",
                 nargs);
    return nullptr;
  }
  PyObject* result = nullptr;
  if (!WhileNotStepped(self, kPatienceForStack,
                       [&] { result = PyObject_CallNoArgs(args[0]); })) {
    return Py_NewRef(args[1]);
  }
  return result;
}

}  // namespace

TaskStepState TaskStepStateOf(PyObject* task) {
  TaskUnit* unit = AsTask(task)->unit;
  if (unit == nullptr) return TaskStepState::kDone;
  const std::uint64_t word = unit->state().Load();
  if (word & rt_task::State::kComplete) return TaskStepState::kDone;
  if (word & rt_task::State::kRunning) return TaskStepState::kRunning;
  if (word & rt_task::State::kScheduled) return TaskStepState::kReady;
  return TaskStepState::kWaiting;
}

namespace {

PyObject* Task_mt_stats(PyObject* self, PyObject*) {
  TaskObject* t = AsTask(self);
  if (t->unit == nullptr) Py_RETURN_NONE;
  const std::uint64_t word = t->unit->state().Load();
  const char* state = "waiting";
  if (FutureIsDone(&t->base) || (word & rt_task::State::kComplete)) {
    state = "done";
  } else if (word & rt_task::State::kRunning) {
    state = "running";
  } else if (word & rt_task::State::kScheduled) {
    state = "ready";
  }
  const TaskUnit::Stats s = t->unit->stats();
  const std::uint64_t now = runtime::metrics::CycleClock::Now();
  const double age_s =
      now > s.created_cycles ? runtime::metrics::CycleClock::ToNs(now - s.created_cycles) / 1e9
                             : 0.0;
  return Py_BuildValue("(KsKKdiK)", static_cast<unsigned long long>(t->unit->id()), state,
                       static_cast<unsigned long long>(s.steps),
                       static_cast<unsigned long long>(
                           runtime::metrics::CycleClock::ToNs(s.busy_cycles)),
                       age_s, s.last_worker, static_cast<unsigned long long>(s.self_wakes));
}

PyMethodDef task_methods[] = {
    {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Task_cancel)),
     METH_VARARGS | METH_KEYWORDS, "cancel($self, /, msg=None)\n--\n\nRequest that the task be cancelled."},
    {"cancelling", Task_cancelling, METH_NOARGS,
     "cancelling($self, /)\n--\n\nNumber of pending cancellation requests."},
    {"uncancel", Task_uncancel, METH_NOARGS, "uncancel($self, /)\n--\n\nDecrement the cancellation count."},
    {"get_coro", Task_get_coro, METH_NOARGS, "get_coro($self, /)\n--\n\nThe wrapped coroutine."},
    {"get_context", Task_get_context, METH_NOARGS, "get_context($self, /)\n--\n\nThe task's contextvars.Context."},
    {"get_name", Task_get_name, METH_NOARGS, "get_name($self, /)\n--\n\nThe task's name."},
    {"set_name", Task_set_name, METH_O, "set_name($self, value, /)\n--\n\nRename the task."},
    {"get_stack",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Task_get_stack)),
     METH_VARARGS | METH_KEYWORDS, "get_stack($self, /, *, limit=None)\n--\n\nThe coroutine's frames."},
    {"print_stack",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Task_print_stack)),
     METH_VARARGS | METH_KEYWORDS, "print_stack($self, /, *, limit=None, file=None)\n--\n\n"
     "Print the coroutine's frames."},
    {"set_result", Task_set_result, METH_O,
     "set_result($self, result, /)\n--\n\nNot allowed on a Task (RuntimeError)."},
    {"set_exception", Task_set_exception, METH_O,
     "set_exception($self, exception, /)\n--\n\nNot allowed on a Task (RuntimeError)."},
    {"_wakeup", Task_wakeup, METH_O, "Done callback for foreign futures."},
    {"_mt_stats", Task_mt_stats, METH_NOARGS,
     "(id, state, steps, busy_ns, age_seconds, last_worker, self_wakes) for the control "
     "plane; state is 'running', 'ready', 'waiting' or 'done'."},
    {"_while_not_stepped",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Task_while_not_stepped)),
     METH_FASTCALL,
     "_while_not_stepped(fn, busy): fn() while no worker steps the task, or "
     "`busy` if it stayed busy on another worker throughout a short wait."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef task_getset[] = {
    {"_must_cancel", Task_get_must_cancel, nullptr, nullptr, nullptr},
    {"_fut_waiter", Task_get_fut_waiter, nullptr, nullptr, nullptr},
    {"_coro", Task_get_coro_attr, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot task_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Task_new)},
    {Py_tp_init, reinterpret_cast<void*>(Task_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Task_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Task_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Task_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Task_repr)},
    {Py_tp_methods, task_methods},
    {Py_tp_getset, task_getset},
    {Py_tp_doc, const_cast<char*>("A coroutine stepped in parallel on the runtime's workers.")},
    {0, nullptr},
};

PyType_Spec task_spec = {
    .name = "mt_asyncio._core.Task",
    .basicsize = sizeof(TaskObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = task_slots,
};

PyObject* Module_current_task(PyObject*, PyObject*) {
  PyObject* current = CurrentTask();
  return Py_NewRef(current != nullptr ? current : Py_None);
}

PyObject* Module_set_running_task_repr(PyObject*, PyObject* fn) {
  Py_XSETREF(running_task_repr, Py_NewRef(fn));
  Py_RETURN_NONE;
}

PyMethodDef module_functions[] = {
    {"_current_task", Module_current_task, METH_NOARGS,
     "The task being stepped on this thread, or None."},
    {"_set_running_task_repr", Module_set_running_task_repr, METH_O,
     "The repr for a task that another worker is stepping right now."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PyObject* TaskCreate(PyObject* loop, PyObject* coro, PyObject* name, PyObject* context,
                     bool eager_start) {
  PyObject* self = task_type->tp_alloc(task_type, 0);
  if (self == nullptr) return nullptr;
  if (TaskInitialize(self, coro, loop, name, context, eager_start) < 0) {
    Py_DECREF(self);
    return nullptr;
  }
  return self;
}

int RegisterTaskType(PyObject* module) {
  PyObject* asyncio_c = PyImport_ImportModule("_asyncio");
  PyObject* base_tasks = PyImport_ImportModule("asyncio.base_tasks");
  PyObject* events = PyImport_ImportModule("asyncio.events");
  PyObject* coroutines = PyImport_ImportModule("asyncio.coroutines");
  if (asyncio_c == nullptr || base_tasks == nullptr || events == nullptr ||
      coroutines == nullptr) {
    Py_XDECREF(asyncio_c);
    Py_XDECREF(base_tasks);
    Py_XDECREF(events);
    Py_XDECREF(coroutines);
    return -1;
  }
  task_repr = PyObject_GetAttrString(base_tasks, "_task_repr");
  task_get_stack = PyObject_GetAttrString(base_tasks, "_task_get_stack");
  task_print_stack = PyObject_GetAttrString(base_tasks, "_task_print_stack");
  get_event_loop = PyObject_GetAttrString(events, "get_event_loop");
  iscoroutine = PyObject_GetAttrString(coroutines, "iscoroutine");
  stdlib_task_type = PyObject_GetAttrString(asyncio_c, "Task");
  Py_DECREF(asyncio_c);
  Py_DECREF(base_tasks);
  Py_DECREF(events);
  Py_DECREF(coroutines);
  str_loop = PyUnicode_InternFromString("loop");
  if (!task_repr || !task_get_stack || !task_print_stack || !get_event_loop || !iscoroutine ||
      !stdlib_task_type || !str_loop || task_internal::InitTaskSteps() < 0) {
    return -1;
  }
  task_type = reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(
      module, &task_spec, reinterpret_cast<PyObject*>(FutureType())));
  if (task_type == nullptr) return -1;
  FutureHooks hooks = GetFutureHooks();
  hooks.wake_task = WakeTask;
  hooks.current_task_id = []() -> std::uint64_t {
    runtime::task::Task* unit = CurrentTaskUnit();
    return unit != nullptr ? unit->id() : 0;
  };
  SetFutureHooks(hooks);
  rt_task::State::SetInspectionWait(WaitOutInspection);
  if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
  return PyModule_AddObjectRef(module, "Task", reinterpret_cast<PyObject*>(task_type));
}

}  // namespace mt::pyext
