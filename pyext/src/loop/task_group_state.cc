#include "pyext/src/loop/task_group_state.h"

#include <utility>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/future/awaited_by.h"
#include "pyext/src/future/future.h"

namespace mt::pyext {
namespace {

struct TaskGroupStateObject {
  PyObject_HEAD
  // The group's lock; zero-initialized is unlocked.
  PyMutex mu;
  // Guarded by `mu` once tasks exist.
  PyObject* tasks;   // set: the live tasks (TaskGroup._tasks is this set).
  PyObject* waiter;  // The future __aexit__ waits on, or nullptr.
  PyObject* parent;  // The task that entered the group, or nullptr.
  bool aborting;
  // Set by bind() when the group is entered, dropped by release() when it
  // is left: the bound method points back at the group, and a cycle kept
  // past the group's life would be garbage stdlib's TaskGroup never makes.
  PyObject* on_done;  // The group's Python _on_task_done.
  PyObject* loop;
  PyObject* context;  // What the Python callback runs in (as stdlib: the
                      // context of the task that entered the group).
};

PyObject* str_call_soon = nullptr;
PyObject* str_add_done_callback = nullptr;
PyObject* str_set_result = nullptr;
PyObject* str_done = nullptr;
PyObject* kwnames_context = nullptr;

TaskGroupStateObject* AsState(PyObject* o) {
  return reinterpret_cast<TaskGroupStateObject*>(o);
}

// loop.call_soon(on_done, task, context=context): the path of every task
// that is not a plain success.
void ScheduleOnDone(TaskGroupStateObject* s, PyObject* task) {
  PyObject *loop, *on_done, *context;
  {
    PyMutexGuard lock(s->mu);
    loop = Py_XNewRef(s->loop);
    on_done = Py_XNewRef(s->on_done);
    context = Py_XNewRef(s->context);
  }
  if (context != nullptr) {
    // A copy per callback, as add_done_callback makes: two callbacks
    // running at once on two workers cannot both enter one context.
    Py_SETREF(context, PyContext_Copy(context));
    if (context == nullptr) {
      Py_XDECREF(loop);
      Py_XDECREF(on_done);
      PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(s));
      return;
    }
  }
  PyObject* r = Py_None;
  // Both are null once released: nothing to report to then.
  if (loop != nullptr && on_done != nullptr) {
    PyObject* args[] = {loop, on_done, task, context};
    r = PyObject_VectorcallMethod(
        str_call_soon, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
        context != nullptr ? kwnames_context : nullptr);
  }
  Py_XDECREF(loop);
  Py_XDECREF(on_done);
  Py_XDECREF(context);
  if (r == nullptr) {
    PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(s));
    return;
  }
  Py_DECREF(r);
}

// waiter.set_result(True) unless it is done (the parent may have been
// cancelled while the last task finished).
void WakeWaiter(PyObject* waiter) {
  if (PyObject_TypeCheck(waiter, FutureType())) {
    if (FutureTrySetResult(reinterpret_cast<FutureObject*>(waiter), Py_True) <
        0) {
      PyErr_WriteUnraisable(waiter);
    }
    return;
  }
  PyObject* done = PyObject_CallMethodNoArgs(waiter, str_done);
  const int is_done = done != nullptr ? PyObject_IsTrue(done) : -1;
  Py_XDECREF(done);
  if (is_done != 0) {
    if (is_done < 0) PyErr_WriteUnraisable(waiter);
    return;
  }
  PyObject* r = PyObject_CallMethodOneArg(waiter, str_set_result, Py_True);
  if (r != nullptr) {
    Py_DECREF(r);
  } else if (PyErr_ExceptionMatches(InvalidStateErrorType())) {
    PyErr_Clear();  // Lost a race to a cancel.
  } else {
    PyErr_WriteUnraisable(waiter);
  }
}

// The native done callback of a task of ours: stdlib's _on_task_done for a
// task that returned, done here; anything else goes to the Python one.
void TaskDone(PyObject* owner, FutureObject* task) {
  TaskGroupStateObject* s = AsState(owner);
  PyObject* task_obj = reinterpret_cast<PyObject*>(task);
  // A done future's outcome never changes, so no lock is needed to look.
  if (FutureCurrentState(task) != FutureState::kFinished ||
      task->exception != nullptr) {
    ScheduleOnDone(s, task_obj);
    return;
  }
  PyObject* waiter = nullptr;
  PyObject* parent = nullptr;
  int rc = 0;
  {
    PyMutexGuard lock(s->mu);
    if (s->tasks != nullptr) {
      rc = PySet_Discard(s->tasks, task_obj);
      if (rc >= 0 && PySet_GET_SIZE(s->tasks) == 0 && s->waiter != nullptr) {
        waiter = Py_NewRef(s->waiter);
      }
    }
    parent = Py_XNewRef(s->parent);
  }
  if (rc < 0) PyErr_WriteUnraisable(owner);
  if (parent != nullptr) {
    PyObject* r = FutureDiscardFromAwaitedBy(task_obj, parent);
    if (r == nullptr) PyErr_WriteUnraisable(owner);
    Py_XDECREF(r);
    Py_DECREF(parent);
  }
  if (waiter != nullptr) {
    WakeWaiter(waiter);
    Py_DECREF(waiter);
  }
}

PyObject* State_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (!PyArg_ParseTuple(args, ":_TaskGroupState") ||
      (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0)) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "_TaskGroupState takes no arguments");
    return nullptr;
  }
  PyObject* tasks = PySet_New(nullptr);
  if (tasks == nullptr) return nullptr;
  auto* s = reinterpret_cast<TaskGroupStateObject*>(type->tp_alloc(type, 0));
  if (s == nullptr) {
    Py_DECREF(tasks);
    return nullptr;
  }
  s->tasks = tasks;
  return reinterpret_cast<PyObject*>(s);
}

// Swaps the four fields bind() sets; the old values are dropped after the
// lock is released (a drop may run a finalizer).
PyObject* SwapBound(PyObject* self, PyObject* loop, PyObject* parent,
                    PyObject* context, PyObject* on_done) {
  TaskGroupStateObject* s = AsState(self);
  PyObject* old[4];
  {
    PyMutexGuard lock(s->mu);
    old[0] = std::exchange(s->loop, Py_XNewRef(loop));
    old[1] = std::exchange(s->parent, Py_XNewRef(parent));
    old[2] = std::exchange(s->context, Py_XNewRef(context));
    old[3] = std::exchange(s->on_done, Py_XNewRef(on_done));
  }
  for (PyObject* o : old) Py_XDECREF(o);
  Py_RETURN_NONE;
}

PyObject* NullIfNone(PyObject* o) { return o == Py_None ? nullptr : o; }

PyObject* State_bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_Format(PyExc_TypeError, "bind expected 4 arguments, got %zd", nargs);
    return nullptr;
  }
  return SwapBound(self, args[0], NullIfNone(args[1]), NullIfNone(args[2]),
                   args[3]);
}

PyObject* State_release(PyObject* self, PyObject*) {
  return SwapBound(self, nullptr, nullptr, nullptr, nullptr);
}

// add(task) -> whether the group is aborting: the task joins the live set
// and gets its done callback.
PyObject* State_add(PyObject* self, PyObject* task) {
  TaskGroupStateObject* s = AsState(self);
  bool aborting;
  PyObject* on_done;
  {
    PyMutexGuard lock(s->mu);
    if (s->on_done == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "the TaskGroup is not entered");
      return nullptr;
    }
    if (PySet_Add(s->tasks, task) < 0) return nullptr;
    aborting = s->aborting;
    on_done = Py_NewRef(s->on_done);
  }
  // A task done already (it ran eagerly, or on another worker since it was
  // created) gets the Python callback, scheduled, as stdlib always does.
  PyObject* r = Py_None;
  if (!PyObject_TypeCheck(task, FutureType()) ||
      FutureAddNativeCallback(reinterpret_cast<FutureObject*>(task), self,
                              TaskDone) != 0) {
    r = PyObject_CallMethodOneArg(task, str_add_done_callback, on_done);
    if (r != nullptr) Py_DECREF(r);
  }
  Py_DECREF(on_done);
  if (r == nullptr) return nullptr;
  return PyBool_FromLong(aborting);
}

PyObject* State_enter(PyObject* self, PyObject*) {
  LockPyMutex(&AsState(self)->mu);
  return Py_NewRef(self);
}

PyObject* State_exit(PyObject* self, PyObject*) {
  PyMutex_Unlock(&AsState(self)->mu);
  Py_RETURN_FALSE;
}

PyObject* State_get_tasks(PyObject* self, void*) {
  PyObject* tasks = AsState(self)->tasks;
  return tasks != nullptr ? Py_NewRef(tasks) : PySet_New(nullptr);
}

// The rest are read and written by the Python code under `with state:`.
PyObject* State_get_waiter(PyObject* self, void*) {
  PyObject* waiter = AsState(self)->waiter;
  return Py_NewRef(waiter != nullptr ? waiter : Py_None);
}

int State_set_waiter(PyObject* self, PyObject* value, void*) {
  Py_XSETREF(AsState(self)->waiter,
             value == nullptr || value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
}

PyObject* State_get_aborting(PyObject* self, void*) {
  return PyBool_FromLong(AsState(self)->aborting);
}

int State_set_aborting(PyObject* self, PyObject* value, void*) {
  const int on = value != nullptr ? PyObject_IsTrue(value) : 0;
  if (on < 0) return -1;
  AsState(self)->aborting = on != 0;
  return 0;
}

int State_traverse(PyObject* self, visitproc visit, void* arg) {
  TaskGroupStateObject* s = AsState(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(s->tasks);
  Py_VISIT(s->waiter);
  Py_VISIT(s->parent);
  Py_VISIT(s->on_done);
  Py_VISIT(s->loop);
  Py_VISIT(s->context);
  return 0;
}

int State_clear(PyObject* self) {
  TaskGroupStateObject* s = AsState(self);
  Py_CLEAR(s->tasks);
  Py_CLEAR(s->waiter);
  Py_CLEAR(s->parent);
  Py_CLEAR(s->on_done);
  Py_CLEAR(s->loop);
  Py_CLEAR(s->context);
  return 0;
}

void State_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  State_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef state_methods[] = {
    {"bind",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(State_bind)),
     METH_FASTCALL,
     "bind(loop, parent, context, on_done): set when the group is entered."},
    {"release", State_release, METH_NOARGS,
     "Drop what bind() set: the group has been left."},
    {"add", State_add, METH_O,
     "add(task) -> aborting: the task joins the group, with its done "
     "callback."},
    {"__enter__", State_enter, METH_NOARGS, "Take the group's lock."},
    {"__exit__", State_exit, METH_VARARGS, "Release the group's lock."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef state_getset[] = {
    {"tasks", State_get_tasks, nullptr, nullptr, nullptr},
    {"waiter", State_get_waiter, State_set_waiter, nullptr, nullptr},
    {"aborting", State_get_aborting, State_set_aborting, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot state_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(State_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(State_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(State_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(State_clear)},
    {Py_tp_methods, state_methods},
    {Py_tp_getset, state_getset},
    {Py_tp_doc, const_cast<char*>(
                    "What a TaskGroup's done callbacks share, and its lock.")},
    {0, nullptr},
};

PyType_Spec state_spec = {
    .name = "mt_asyncio._core._TaskGroupState",
    .basicsize = sizeof(TaskGroupStateObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = state_slots,
};

}  // namespace

int RegisterTaskGroupState(PyObject* module) {
  str_call_soon = PyUnicode_InternFromString("call_soon");
  str_add_done_callback = PyUnicode_InternFromString("add_done_callback");
  str_set_result = PyUnicode_InternFromString("set_result");
  str_done = PyUnicode_InternFromString("done");
  PyObject* str_context = PyUnicode_InternFromString("context");
  kwnames_context =
      str_context != nullptr ? PyTuple_Pack(1, str_context) : nullptr;
  Py_XDECREF(str_context);
  if (!str_call_soon || !str_add_done_callback || !str_set_result ||
      !str_done || !kwnames_context) {
    return -1;
  }
  PyObject* type = PyType_FromModuleAndSpec(module, &state_spec, nullptr);
  if (type == nullptr) return -1;
  const int rc = PyModule_AddObjectRef(module, "_TaskGroupState", type);
  Py_DECREF(type);
  return rc;
}

}  // namespace mt::pyext
