// Strands seen from Python (runtime/scheduler/strand.h).
//
// _core._serial_task(loop, coro, context): a task on the loop's serial
// strand, which the tasks it starts share (and every earlier main task of
// the loop), so they step one at a time, each after the previous, as on a
// one-thread loop, while the connections they make or serve still run in
// parallel with each other. What compat.install() gives
// asyncio.run()'s main task: libraries share objects between the tasks of
// a program (an HTTP client's connection pool) the way a one-thread loop
// lets them.
//
// _core._connection_strand(loop) and _core._on_strand(strand, fn, *args):
// what the transports written in Python (pipes, subprocesses) use to be
// one strand each, as a socket connection is: the strand is a child of the
// calling code's (which joins one if it runs in a task), and what fn
// schedules while it runs on the caller's thread — fd watchers, callbacks,
// tasks — is bound to the strand.
//
// _core._adopt_serial_strand(loop): see AdoptSerialStrand.

#include "pyext/src/loop/strands.h"

#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/task.h"
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
  Strand* strand = LoopSerialStrand(loop);
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

// Makes the loop's serial strand now, before its first main task: under
// compat.install() a loop a program builds and fills with create_task()
// before running it (or between runs) steps those tasks one at a time with
// its main task's, as a one-thread loop does, rather than in parallel
// until the first run_until_complete() makes the strand.
PyObject* AdoptSerialStrand(PyObject*, PyObject* loop) {
  if (!IsLoop(loop)) {
    PyErr_SetString(PyExc_TypeError, "_adopt_serial_strand(loop)");
    return nullptr;
  }
  LoopSerialStrand(loop)->Unref();  // The loop keeps its own reference.
  Py_RETURN_NONE;
}

constexpr const char* kStrandCapsule = "mt_asyncio._core.strand";

void DropStrand(PyObject* capsule) {
  auto* strand = static_cast<Strand*>(PyCapsule_GetPointer(capsule, kStrandCapsule));
  if (strand != nullptr) strand->Unref();
}

PyObject* ConnectionStrand(PyObject*, PyObject* loop) {
  if (!IsLoop(loop)) {
    PyErr_SetString(PyExc_TypeError, "_connection_strand(loop)");
    return nullptr;
  }
  Strand* strand = NewConnectionStrand(loop);
  PyObject* capsule = PyCapsule_New(strand, kStrandCapsule, DropStrand);
  if (capsule == nullptr) strand->Unref();
  return capsule;
}

PyObject* OnStrand(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "_on_strand(strand, fn, *args)");
    return nullptr;
  }
  auto* strand = static_cast<Strand*>(PyCapsule_GetPointer(args[0], kStrandCapsule));
  if (strand == nullptr) return nullptr;
  Strand::CurrentScope scope(strand);
  return PyObject_Vectorcall(args[1], args + 2, nargs - 2, nullptr);
}

PyMethodDef methods[] = {
    {"_adopt_serial_strand", AdoptSerialStrand, METH_O,
     "Binds the loop's outside work to its serial strand from now on."},
    {"_connection_strand", ConnectionStrand, METH_O,
     "A new strand for a transport the calling code makes (a capsule)."},
    {"_on_strand",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(OnStrand)),
     METH_FASTCALL, "Calls fn(*args) with what it schedules bound to the strand."},
    {"_serial_task",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(SerialTask)),
     METH_FASTCALL, "A task whose descendants share its strand."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterStrandFunctions(PyObject* module) { return PyModule_AddFunctions(module, methods); }

runtime::scheduler::Strand* OwnerStrand(PyObject* loop) {
  using runtime::scheduler::Strand;
  Strand* current = Strand::Current();
  runtime::task::Task* unit = CurrentTaskUnit();
  if (current != nullptr) {
    // A task running on the strand another task joined to own connections
    // inherited it (it was started from that task). What it makes now is
    // its own: it joins a strand of its own under the inherited one, so
    // its steps and its connections still never overlap the owner's steps,
    // but no longer exclude the owner's other connections and the other
    // tasks it started. Clients that a server's owner starts ran one at a
    // time, each step waiting for every connection of the process to leave
    // (echo_streams_inproc: two workers slower than one). The strands of
    // connections (the tasks their callbacks start share them on purpose)
    // and compat's serial strand (made for no unit) are kept.
    const std::uint64_t owner_unit = current->made_for();
    if (unit == nullptr || owner_unit == 0 || owner_unit == unit->id()) {
      current->Ref();
      return current;
    }
  } else if (unit == nullptr) {
    return nullptr;
  }
  // The task's strand takes over from its next step; this step still runs
  // where it ran. What it makes later in this step goes under the same one.
  runtime::task::Executor* bound = unit->executor();
  if (bound != nullptr && bound->made_for() == unit->id()) {
    auto* own = static_cast<Strand*>(bound);  // Only strands are made for a unit.
    own->Ref();
    return own;
  }
  if (current != nullptr && bound != current) {
    current->Ref();  // Bound elsewhere on purpose (a CurrentScope): kept.
    return current;
  }
  // From this step on, the task's wakes go through its new strand, and so
  // do those of the tasks it starts: libraries start helpers from the task
  // that owns a server (websockets' closing task, say) that expect to see
  // the connections as the owner does.
  Strand* owner = Strand::Create(LoopRuntime(loop).executor(), current,
                                 Strand::Inherit::kYes, unit->id());
  ClaimForLoop(loop, owner);
  unit->set_executor(owner);
  return owner;
}

runtime::scheduler::Strand* NewConnectionStrand(PyObject* loop) {
  using runtime::scheduler::Strand;
  Strand* owner = OwnerStrand(loop);
  Strand* strand = Strand::Create(LoopRuntime(loop).executor(), owner);
  ClaimForLoop(loop, strand);
  if (owner != nullptr) owner->Unref();
  return strand;
}

}  // namespace mt::pyext
