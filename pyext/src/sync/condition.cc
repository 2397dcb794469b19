#include "pyext/src/sync/condition.h"

#include <vector>

#include "pyext/src/common/shared_refcount.h"
#include "pyext/src/future/future.h"
#include "pyext/src/sync/waiters.h"

namespace mt::pyext {
namespace {

PyTypeObject* condition_type = nullptr;
PyTypeObject* wait_type = nullptr;
PyObject* str_locked = nullptr;
PyObject* str_acquire = nullptr;
PyObject* str_release = nullptr;
PyObject* str_throw = nullptr;
PyObject* str_close = nullptr;

struct ConditionObject {
  PrimitiveObject base;  // The waiters, under base.mu.
  PyObject* lock;        // Strong: the associated lock (ours or any lock-like).
};

ConditionObject* AsCondition(PyObject* o) { return reinterpret_cast<ConditionObject*>(o); }

// lock.locked() as 1/0, or -1 with an error.
int LockIsLocked(ConditionObject* c) {
  PyObject* r = PyObject_CallMethodNoArgs(c->lock, str_locked);
  if (r == nullptr) return -1;
  const int locked = PyObject_IsTrue(r);
  Py_DECREF(r);
  return locked;
}

// Wakes up to `n` waiters still pending, oldest first (a waiter cancelled
// meanwhile does not count).
void Notify(ConditionObject* c, Py_ssize_t n) {
  std::vector<FutureObject*> pending;
  {
    PyMutexGuard g(c->base.mu, PyMutexGuard::kReentrant);
    pending = c->base.waiters->PendingSnapshot();
  }
  Py_ssize_t woken = 0;
  for (FutureObject* f : pending) {
    if (woken < n) {
      if (WakeWaiter(f, Py_False)) ++woken;
    } else {
      Py_DECREF(reinterpret_cast<PyObject*>(f));
    }
  }
}

// --- wait() -----------------------------------------------------------------------------

enum WaitPhase : unsigned char { kStart, kWaiting, kReacquiring, kDone };

// The awaiter of Condition.wait(): queue a future, release the lock, wait
// for a notification, then take the lock again — even when cancelled, as
// asyncio does: an error that ends the wait is remembered, the lock is
// re-acquired (a cancel during that is remembered instead and the acquire
// tried again), and only then is the error raised.
struct WaitObject {
  PyObject_HEAD
  WaitPhase phase;
  PyObject* cond;     // Strong.
  FutureObject* fut;  // The queued future while kWaiting (strong).
  PyObject* inner;    // What is awaited now: fut's iterator or lock.acquire()'s.
  PyObject* error;    // Raised once the lock is held again (strong), or nullptr.
};

WaitObject* AsWait(PyObject* o) { return reinterpret_cast<WaitObject*>(o); }

int StartWaiting(WaitObject* w) {
  ConditionObject* c = AsCondition(w->cond);
  const int locked = LockIsLocked(c);
  if (locked <= 0) {
    if (locked == 0) PyErr_SetString(PyExc_RuntimeError, "cannot wait on un-acquired lock");
    return -1;
  }
  FutureObject* fut = NewWaiterFuture(w->cond, &c->base.mu, &c->base.loop);
  if (fut == nullptr) return -1;
  PyObject* inner = FutureAwaitIter(fut);
  if (inner == nullptr) {
    Py_DECREF(reinterpret_cast<PyObject*>(fut));
    return -1;
  }
  // Dropped on the notifier's worker, often, as the future and its
  // iterator are (shared when the iterator yields): see ShareRefcount.
  ShareRefcount(reinterpret_cast<PyObject*>(w));
  // Queued *before* the lock is released: the moment it is, a task on
  // another worker may take it and notify, and must find this waiter.
  {
    PyMutexGuard g(c->base.mu, PyMutexGuard::kReentrant);
    c->base.waiters->Push(fut);
  }
  PyObject* r = PyObject_CallMethodNoArgs(c->lock, str_release);
  if (r == nullptr) {
    {
      PyMutexGuard g(c->base.mu, PyMutexGuard::kReentrant);
      c->base.waiters->Remove(fut);
    }
    Py_DECREF(inner);
    Py_DECREF(reinterpret_cast<PyObject*>(fut));
    return -1;
  }
  Py_DECREF(r);
  w->fut = fut;
  w->inner = inner;
  w->phase = kWaiting;
  return 0;
}

// Leaves the queue. `pass_on`: the wait ends with an error, so a
// notification this waiter was given goes to another one rather than
// being lost. Keeps any error that is set.
void LeaveQueue(WaitObject* w, bool pass_on) {
  PyObject* saved = PyErr_GetRaisedException();
  ConditionObject* c = AsCondition(w->cond);
  // Still pending only when closed or collected mid-wait: cancelling
  // settles a race with a notifier.
  if (FutureCurrentState(w->fut) == FutureState::kPending &&
      FutureCancel(w->fut, Py_None) < 0) {
    PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(w));
  }
  {
    PyMutexGuard g(c->base.mu, PyMutexGuard::kReentrant);
    c->base.waiters->Remove(w->fut);
  }
  const bool notified = FutureCurrentState(w->fut) == FutureState::kFinished;
  Py_CLEAR(w->fut);
  if (pass_on && notified) Notify(c, 1);
  PyErr_SetRaisedException(saved);
}

// The wait ends by raising `exc` (consumed). As asyncio's wait() does on
// any error, another waiter is notified first: this one may have been
// notified before the error (a cancel racing a notify()), and that wakeup
// must not be lost; when it was not, the other gets a spurious wakeup,
// which a condition variable allows.
void EndWithError(WaitObject* w, PyObject* exc) {
  w->phase = kDone;
  Notify(AsCondition(w->cond), 1);
  PyErr_SetRaisedException(exc);
}

int StartReacquiring(WaitObject* w) {
  w->phase = kReacquiring;
  PyObject* acquiring =
      PyObject_CallMethodNoArgs(AsCondition(w->cond)->lock, str_acquire);
  if (acquiring == nullptr) return -1;
  w->inner = AwaitIter(acquiring);
  Py_DECREF(acquiring);
  return w->inner == nullptr ? -1 : 0;
}

// The awaited step failed with `exc` (consumed). 0: go on (re-acquiring);
// -1: the wait is over with an error set.
int OnError(WaitObject* w, PyObject* exc) {
  Py_CLEAR(w->inner);
  if (w->phase == kWaiting) {
    // The notification this waiter may have had is passed on when the
    // error is raised, once the lock is held again (EndWithError).
    LeaveQueue(w, /*pass_on=*/false);
  } else if (!PyErr_GivenExceptionMatches(exc, CancelledErrorType())) {
    // Only a cancel is retried, as asyncio's loop does; anything else
    // ends the wait without the lock.
    Py_CLEAR(w->error);
    EndWithError(w, exc);
    return -1;
  }
  Py_XSETREF(w->error, exc);
  if (StartReacquiring(w) < 0) {
    Py_CLEAR(w->error);
    EndWithError(w, PyErr_GetRaisedException());
    return -1;
  }
  return 0;
}

// Drives whatever is awaited now until it yields or the wait is over.
PySendResult Drive(WaitObject* w, PyObject** out) {
  for (;;) {
    PyObject* yielded = nullptr;
    const PySendResult r = PyIter_Send(w->inner, Py_None, &yielded);
    if (r == PYGEN_NEXT) {
      *out = yielded;
      return PYGEN_NEXT;
    }
    if (r == PYGEN_ERROR) {
      if (OnError(w, PyErr_GetRaisedException()) < 0) return PYGEN_ERROR;
      continue;
    }
    Py_DECREF(yielded);
    Py_CLEAR(w->inner);
    if (w->phase == kWaiting) {  // Notified: take the lock again.
      LeaveQueue(w, /*pass_on=*/false);
      if (StartReacquiring(w) < 0) {
        EndWithError(w, PyErr_GetRaisedException());
        return PYGEN_ERROR;
      }
      continue;
    }
    w->phase = kDone;  // The lock is held again.
    if (w->error != nullptr) {
      PyObject* error = w->error;
      w->error = nullptr;
      EndWithError(w, error);
      return PYGEN_ERROR;
    }
    *out = Py_NewRef(Py_True);
    return PYGEN_RETURN;
  }
}

PySendResult Wait_am_send(PyObject* self, PyObject*, PyObject** out) {
  WaitObject* w = AsWait(self);
  *out = nullptr;
  if (w->phase == kDone) {
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
    return PYGEN_ERROR;
  }
  if (w->phase == kStart && StartWaiting(w) < 0) {
    w->phase = kDone;
    return PYGEN_ERROR;
  }
  return Drive(w, out);
}

PyObject* Wait_iternext(PyObject* self) {
  PyObject* out;
  const PySendResult result = Wait_am_send(self, Py_None, &out);
  return IterNextSlotFromSend(result, out);
}

PyObject* Wait_send(PyObject* self, PyObject*) {
  PyObject* out;
  const PySendResult result = Wait_am_send(self, Py_None, &out);
  return IterNextFromSend(result, out);
}

// As a coroutine's throw(): the exception lands where wait() is awaiting.
PyObject* Wait_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  WaitObject* w = AsWait(self);
  if (w->phase == kStart || w->phase == kDone) {
    w->phase = kDone;
    RaiseThrowArguments(args, nargs);
    return nullptr;
  }
  RaiseThrowArguments(args, nargs);
  PyObject* exc = PyErr_GetRaisedException();
  if (w->phase == kReacquiring) {
    // Into the acquire in progress, which leaves the lock's queue and
    // raises it back (or yields again, or finishes).
    PyObject* r = PyObject_CallMethodOneArg(w->inner, str_throw, exc);
    if (r != nullptr) {
      Py_DECREF(exc);
      return r;
    }
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
      // The lock was handed over before the exception came: it is held.
      PyErr_Clear();
      Py_CLEAR(w->inner);
      w->phase = kDone;
      if (PyErr_GivenExceptionMatches(exc, CancelledErrorType())) {
        // A cancel is not lost for coming late: asyncio's acquire would
        // have raised it, been retried, and the wait raises it now.
        Py_XSETREF(w->error, exc);
      } else {
        // Anything else ends the wait without the lock, as in asyncio.
        PyObject* res = PyObject_CallMethodNoArgs(AsCondition(w->cond)->lock, str_release);
        if (res == nullptr) {
          Py_DECREF(exc);
          Py_CLEAR(w->error);
          return nullptr;
        }
        Py_DECREF(res);
        Py_CLEAR(w->error);
        EndWithError(w, exc);
        return nullptr;
      }
      PyObject* error = w->error;
      w->error = nullptr;
      EndWithError(w, error);
      return nullptr;
    }
    Py_DECREF(exc);
    exc = PyErr_GetRaisedException();
  }
  if (OnError(w, exc) < 0) return nullptr;
  PyObject* out;
  const PySendResult result = Drive(w, &out);
  return IterNextFromSend(result, out);
}

// Ends the wait without taking the lock again (the coroutine is closing).
void Abandon(WaitObject* w) {
  if (w->phase == kWaiting) {
    Py_CLEAR(w->inner);
    LeaveQueue(w, /*pass_on=*/true);
  } else if (w->phase == kReacquiring && w->inner != nullptr) {
    PyObject* r = PyObject_CallMethodNoArgs(w->inner, str_close);
    if (r == nullptr) PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(w));
    Py_XDECREF(r);
    Py_CLEAR(w->inner);
  }
  Py_CLEAR(w->error);
  w->phase = kDone;
}

PyObject* Wait_close(PyObject* self, PyObject*) {
  Abandon(AsWait(self));
  Py_RETURN_NONE;
}

void Wait_finalize(PyObject* self) {
  WaitObject* w = AsWait(self);
  if (w->phase != kWaiting && w->phase != kReacquiring) return;
  PyObject* saved = PyErr_GetRaisedException();
  Abandon(w);
  PyErr_SetRaisedException(saved);
}

int Wait_traverse(PyObject* self, visitproc visit, void* arg) {
  WaitObject* w = AsWait(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(w->cond);
  Py_VISIT(reinterpret_cast<PyObject*>(w->fut));
  Py_VISIT(w->inner);
  Py_VISIT(w->error);
  return 0;
}

int Wait_clear(PyObject* self) {
  WaitObject* w = AsWait(self);
  Py_CLEAR(w->inner);
  Py_CLEAR(w->fut);
  Py_CLEAR(w->error);
  Py_CLEAR(w->cond);
  return 0;
}

void Wait_dealloc(PyObject* self) {
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return;  // Resurrected.
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  Wait_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// _owner: the Condition waited on, for the diagnostics.
PyObject* Wait_get_owner(PyObject* self, void*) {
  PyObject* cond = AsWait(self)->cond;
  return Py_NewRef(cond != nullptr ? cond : Py_None);
}

PyGetSetDef wait_getset[] = {
    {"_owner", Wait_get_owner, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef wait_methods[] = {
    {"send", Wait_send, METH_O, nullptr},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Wait_throw)),
     METH_FASTCALL, nullptr},
    {"close", Wait_close, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot wait_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Wait_dealloc)},
    {Py_tp_finalize, reinterpret_cast<void*>(Wait_finalize)},
    {Py_tp_traverse, reinterpret_cast<void*>(Wait_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Wait_clear)},
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(Wait_iternext)},
    {Py_tp_methods, wait_methods},
    {Py_tp_getset, wait_getset},
    {Py_am_await, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_am_send, reinterpret_cast<void*>(Wait_am_send)},
    {0, nullptr},
};

PyType_Spec wait_spec = {
    .name = "mt_asyncio._core.ConditionWait",
    .basicsize = sizeof(WaitObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = wait_slots,
};

// --- Condition --------------------------------------------------------------------------

int Condition_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"lock", nullptr};
  PyObject* lock;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Condition", const_cast<char**>(kwlist),
                                   &lock)) {
    return -1;
  }
  Py_XSETREF(AsCondition(self)->lock, Py_NewRef(lock));
  return 0;
}

int Condition_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(AsCondition(self)->lock);
  return PrimitiveTraverse(self, visit, arg);
}

int Condition_clear(PyObject* self) {
  Py_CLEAR(AsCondition(self)->lock);
  return PrimitiveClear(self);
}

void Condition_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);  // Before dropping a reference that may run the GC.
  Py_CLEAR(AsCondition(self)->lock);
  PrimitiveDealloc(self);
}

PyObject* Condition_wait(PyObject* self, PyObject*) {
  auto* w = PyObject_GC_New(WaitObject, wait_type);
  if (w == nullptr) return nullptr;
  w->phase = kStart;
  w->cond = Py_NewRef(self);
  w->fut = nullptr;
  w->inner = nullptr;
  w->error = nullptr;
  PyObject_GC_Track(w);
  return reinterpret_cast<PyObject*>(w);
}

// notify(n=1): wakes up to n waiters; RuntimeError unless the lock is held.
PyObject* Condition_notify(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "notify() takes at most 1 argument (%zd given)", nargs);
    return nullptr;
  }
  Py_ssize_t n = 1;
  if (nargs == 1) {
    n = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return nullptr;
  }
  ConditionObject* c = AsCondition(self);
  const int locked = LockIsLocked(c);
  if (locked <= 0) {
    if (locked == 0) PyErr_SetString(PyExc_RuntimeError, "cannot notify on un-acquired lock");
    return nullptr;
  }
  Notify(c, n);
  Py_RETURN_NONE;
}

PyObject* Condition_notify_all(PyObject* self, PyObject*) {
  PyObject* all = PyLong_FromSsize_t(PY_SSIZE_T_MAX);
  if (all == nullptr) return nullptr;
  PyObject* r = Condition_notify(self, &all, 1);
  Py_DECREF(all);
  return r;
}

PyObject* Condition_get_lock(PyObject* self, void*) {
  return Py_NewRef(AsCondition(self)->lock);
}

PyMethodDef condition_methods[] = {
    {"wait", Condition_wait, METH_NOARGS,
     "wait($self, /)\n--\n\nRelease the lock, wait for a notification, take the lock again (an "
     "awaitable); returns True."},
    {"notify",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Condition_notify)),
     METH_FASTCALL,
     "notify($self, n=1, /)\n--\n\nWake up to n waiters (default 1); the lock must be held."},
    {"notify_all", Condition_notify_all, METH_NOARGS,
     "notify_all($self, /)\n--\n\nWake every waiter; the lock must be held."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef condition_getset[] = {
    {"_lock", Condition_get_lock, nullptr, nullptr, nullptr},
    {"_waiters", PrimitiveWaiters, nullptr, nullptr, nullptr},
    {"_loop", PrimitiveGetLoop, PrimitiveSetLoop, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot condition_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PrimitiveNew)},
    {Py_tp_init, reinterpret_cast<void*>(Condition_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Condition_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Condition_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Condition_clear)},
    {Py_tp_methods, condition_methods},
    {Py_tp_getset, condition_getset},
    {0, nullptr},
};

PyType_Spec condition_spec = {
    .name = "mt_asyncio._core.Condition",
    .basicsize = sizeof(ConditionObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = condition_slots,
};

}  // namespace

int RegisterConditionType(PyObject* module) {
  str_locked = PyUnicode_InternFromString("locked");
  str_acquire = PyUnicode_InternFromString("acquire");
  str_release = PyUnicode_InternFromString("release");
  str_throw = PyUnicode_InternFromString("throw");
  str_close = PyUnicode_InternFromString("close");
  if (!str_locked || !str_acquire || !str_release || !str_throw || !str_close) return -1;
  wait_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &wait_spec, nullptr));
  condition_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &condition_spec, nullptr));
  if (wait_type == nullptr || condition_type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, "ConditionWait",
                            reinterpret_cast<PyObject*>(wait_type)) < 0) {
    return -1;
  }
  return PyModule_AddObjectRef(module, "Condition",
                               reinterpret_cast<PyObject*>(condition_type));
}

}  // namespace mt::pyext
