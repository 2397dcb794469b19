// Task creation on a loop (create_task and the task factory, eager start,
// the first steps gather() holds back) and the loop's registry of pending
// tasks behind all_tasks().

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"
#include "pyext/src/loop/task.h"

namespace mt::pyext {
namespace loop_internal {
namespace {

// Loop.create_task as the type defines it: a subclass that overrides
// create_task must be called through Python.
PyObject* create_task_descr = nullptr;
PyObject* str_create_task = nullptr;

thread_local HeldFirstSteps* held_first_steps = nullptr;

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

}  // namespace

PyObject* Loop_create_future(PyObject* self, PyObject*) { return FutureCreate(self); }

// create_task(coro, *, name=None, context=None, eager_start=None, **kwargs):
// the task factory gets every keyword as given (3.14 rules); without one,
// our Task is built directly.
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

PyObject* Loop_get_task_factory_attr(PyObject* self, void*) {
  return Loop_get_task_factory(self, nullptr);
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

int InitTaskCreation(PyTypeObject* loop_type) {
  str_create_task = PyUnicode_InternFromString("create_task");
  if (str_create_task == nullptr) return -1;
  create_task_descr = PyObject_GetAttr(reinterpret_cast<PyObject*>(loop_type),
                                       str_create_task);
  return create_task_descr == nullptr ? -1 : 0;
}

}  // namespace loop_internal

using loop_internal::ShardLock;
using loop_internal::StateOf;

HeldFirstSteps::HeldFirstSteps()
    : outer_(std::exchange(loop_internal::held_first_steps, this)) {}

HeldFirstSteps::~HeldFirstSteps() {
  loop_internal::held_first_steps = outer_;
  // A loop stopped meanwhile defers them, as LoopWake does for any unit.
  for (const Held& h : held_) {
    LoopWake(h.loop, h.unit);  // Queued, the unit holds the task itself.
    Py_DECREF(h.task);
  }
}

bool HeldFirstSteps::Hold(PyObject* loop, PyObject* task, runtime::task::Task* unit) {
  HeldFirstSteps* scope = loop_internal::held_first_steps;
  if (scope == nullptr) return false;
  scope->held_.push_back({loop, Py_NewRef(task), unit});
  return true;
}

std::uint32_t loop_internal::LoopState::ThisThreadsShard() {
  static std::atomic<std::uint32_t> threads_seen{0};
  thread_local const std::uint32_t shard =
      threads_seen.fetch_add(1, std::memory_order_relaxed) % kTaskShards;
  return shard;
}

void LoopRegisterTask(PyObject* loop, PyObject* task, TaskLink* link) {
  link->shard = loop_internal::LoopState::ThisThreadsShard();
  auto& shard = StateOf(loop)->task_shards[link->shard];
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
  auto& shard = StateOf(loop)->task_shards[link->shard];
  std::lock_guard<ShardLock> lock(shard.mu);
  if (link->next == nullptr) return;  // Not registered.
  --shard.live;
  link->prev->next = link->next;
  link->next->prev = link->prev;
  link->prev = link->next = nullptr;
}

int LoopOverridesCreateTask(PyObject* loop) {
  PyObject* method = PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(loop)),
                                      loop_internal::str_create_task);
  if (method == nullptr) return -1;
  const bool ours = method == loop_internal::create_task_descr;
  Py_DECREF(method);
  return ours ? 0 : 1;
}

PyObject* LoopCreateTaskCore(PyObject* loop, PyObject* coro) {
  PyObject* arg[] = {coro};
  return loop_internal::Loop_create_task(loop, arg, 1, nullptr);
}

bool LoopStartEagerly(PyObject* loop, runtime::task::Task* unit) {
  if (!LoopRunsOnThisThread(loop)) return false;
  if (unit->executor() == nullptr) unit->set_executor(LoopExecutor(loop));
  // Claim the unit as if a worker had taken it off a queue, then run its
  // first step here; a wake during the step requeues it as usual.
  if (unit->state().TransitionToScheduled() ==
      runtime::task::State::WakeAction::kSubmit) {
    runtime::task::RunTask(unit);
  }
  return true;
}

}  // namespace mt::pyext
