// _core._serial_task(loop, coro, context): a task on a new strand that the
// tasks it starts share (runtime/scheduler/strand.h), so they step one at a
// time, each after the previous, as on a one-thread loop, while the
// connections they make or serve still run in parallel with each other.
// What compat.install() gives asyncio.run()'s main task: libraries share
// objects between the tasks of a program (an HTTP client's connection
// pool) the way a one-thread loop lets them.

#include "pyext/src/serial_tasks.h"

#include "pyext/src/loop.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/strand.h"

namespace mt::pyext {
namespace {

using runtime::scheduler::Strand;

PyObject* SerialTask(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !IsLoop(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_serial_task(loop, coro, context)");
    return nullptr;
  }
  PyObject* loop = args[0];
  Strand* strand = Strand::Create(LoopRuntime(loop).executor());
  PyObject* task;
  {
    // create_task binds the new task's unit to the strand current here.
    Strand::CurrentScope scope(strand);
    PyObject* kwnames = Py_BuildValue("(s)", "context");
    PyObject* call[] = {loop, args[1], args[2]};
    PyObject* name = PyUnicode_FromString("create_task");
    task = kwnames != nullptr && name != nullptr
               ? PyObject_VectorcallMethod(name, call, 2,
                                           kwnames)
               : nullptr;
    Py_XDECREF(name);
    Py_XDECREF(kwnames);
  }
  strand->Unref();  // The task's unit holds it.
  return task;
}

PyMethodDef methods[] = {
    {"_serial_task",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(SerialTask)),
     METH_FASTCALL, "A task whose descendants share its strand."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterSerialTasks(PyObject* module) { return PyModule_AddFunctions(module, methods); }

}  // namespace mt::pyext
