// The thread a loop's code is told it runs on.
//
// On stdlib's loop every step and callback runs on the thread in
// run_forever(), and libraries tell "am I on the loop's thread?" by
// threading.get_ident() / threading.current_thread(): anyio's blocking
// portal records the ident where it starts and refuses (rather than
// deadlock on) a call made from that thread; callbacks assert they run on
// the main thread; a portal names its loop's thread. Here a loop's work
// runs on the runtime's workers, which every loop shares, so the real
// ident names a worker that another loop's portal may have recorded.
//
// loop_thread_ident() is installed as threading.get_ident (and so backs
// threading.current_thread()): on a worker inside one of a running loop's
// units it answers the ident of that loop's thread in run_forever(),
// everywhere else the caller's own. _thread.get_ident() and
// threading.get_native_id() keep answering the OS thread, so nothing
// keyed by the real thread (reprlib's recursion guard, locks, thread
// locals, which are C-level) changes.

#include <pthread.h>

#include <atomic>

#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"

namespace mt::pyext {
namespace {

PyObject* LoopThreadIdent(PyObject*, PyObject*) {
  PyObject* loop = LoopOfThisWorker();
  if (loop != nullptr) {
    // The loop is alive while this worker's thread state holds it as the
    // running loop (ForgetClosedLoopOnThisWorker drops both together).
    const unsigned long home = loop_internal::StateOf(loop)->home_ident.load(std::memory_order_acquire);
    if (home != 0) return PyLong_FromUnsignedLong(home);
  }
  return PyLong_FromUnsignedLong(PyThread_get_thread_ident());
}

PyMethodDef thread_identity_methods[] = {
    {"loop_thread_ident", LoopThreadIdent, METH_NOARGS,
     "threading.get_ident() as a loop's code sees it: in a step or callback of a\n"
     "running loop, the ident of the thread in its run_forever(); else the\n"
     "calling thread's own."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterLoopThreadIdentity(PyObject* module) {
  // A forked child's only thread is the one that called fork(): if that
  // was a worker inside a step, the child must see its own ident
  // (threading's after-fork handler re-registers the thread under it).
  static const int atfork_rc = pthread_atfork(nullptr, nullptr, ForgetLoopOfThisWorker);
  if (atfork_rc != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
    return -1;
  }
  return PyModule_AddFunctions(module, thread_identity_methods);
}

}  // namespace mt::pyext
