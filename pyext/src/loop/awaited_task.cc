// _core._create_awaited_task(loop, parent, coro, name, context): what
// TaskGroup.create_task() and shield() do, loop.create_task(coro,
// name=name, context=context) and then future_add_to_awaited_by(task,
// parent), with the new task's first step held until both are done. On
// one thread stdlib's task cannot run before the entry is there; a worker
// of ours could, and the task would not see its parent when it looks.
//
// It lives with the tasks rather than with the awaited_by records
// (future/awaited_by.h) because holding a first step is the loop's.

#include "pyext/src/loop/awaited_task.h"

#include "pyext/src/future/awaited_by.h"
#include "pyext/src/loop/loop.h"

namespace mt::pyext {
namespace {

PyObject* str_create_task = nullptr;
PyObject* kwnames_name_context = nullptr;  // ("name", "context")

PyObject* Module_create_awaited_task(PyObject*, PyObject* const* args,
                                     Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError,
                 "_create_awaited_task expected 5 arguments, got %zd", nargs);
    return nullptr;
  }
  PyObject* parent = args[1];
  PyObject* task;
  {
    HeldFirstSteps held_first_steps;  // Released at the end of this block.
    PyObject* call_args[] = {args[0], args[2], args[3], args[4]};
    task = PyObject_VectorcallMethod(str_create_task, call_args, 2,
                                     kwnames_name_context);
    if (task == nullptr) return nullptr;
    PyObject* r = FutureAddToAwaitedBy(task, parent);
    if (r == nullptr) {
      Py_DECREF(task);
      return nullptr;
    }
    Py_DECREF(r);
  }
  return task;
}

PyMethodDef module_functions[] = {
    {"_create_awaited_task",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(Module_create_awaited_task)),
     METH_FASTCALL,
     "_create_awaited_task(loop, parent, coro, name, context): "
     "loop.create_task(coro, name=name, context=context) recorded as awaited "
     "by `parent` before its first step."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterAwaitedTaskFunctions(PyObject* module) {
  str_create_task = PyUnicode_InternFromString("create_task");
  kwnames_name_context = Py_BuildValue("(ss)", "name", "context");
  if (str_create_task == nullptr || kwnames_name_context == nullptr) return -1;
  return PyModule_AddFunctions(module, module_functions);
}

}  // namespace mt::pyext
