#include "pyext/src/sync/barrier.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pyext/src/sync/waiters.h"

namespace mt::pyext {
namespace {

PyObject* broken_barrier_error = nullptr;  // asyncio.exceptions.BrokenBarrierError
PyTypeObject* barrier_type = nullptr;

enum class BarrierState : unsigned char { kFilling, kDraining, kResetting, kBroken };

const char* StateName(BarrierState state) {
  switch (state) {
    case BarrierState::kFilling:
      return "filling";
    case BarrierState::kDraining:
      return "draining";
    case BarrierState::kResetting:
      return "resetting";
    case BarrierState::kBroken:
      return "broken";
  }
  return "?";
}

// AwaiterObject::number for a wait(): -1 before arriving, the arrival
// index while counted, kLeft once it has left (uncounted).
constexpr Py_ssize_t kLeft = -2;

struct BarrierObject {
  PrimitiveObject base;  // The mutex and the one FIFO every wait uses.
  BarrierState state;
  Py_ssize_t count;  // Arrived and not yet left.
  // The arrival count that releases a round: `parties` as an integer, or
  // PY_SSIZE_T_MAX for a value no count equals (stdlib compares
  // `index + 1 == parties`, so Barrier(2.5) never releases either).
  Py_ssize_t release_at;
  PyObject* parties;  // As given, for the `parties` attribute (strong).
};

BarrierObject* AsBarrier(PyObject* o) { return reinterpret_cast<BarrierObject*>(o); }

// stdlib's notify_all(): every queued waiter looks again when it runs (and
// leaves the queue then).
void WakeEveryoneLocked(BarrierObject* b, AfterUnlock& after) {
  std::vector<FutureObject*> all = b->base.waiters->PendingSnapshot();
  after.wake_all.insert(after.wake_all.end(), all.begin(), all.end());
}

// A counted waiter leaves (released, broken, cancelled or closed): the last
// one out lets a drained or reset barrier fill again, and wakes everyone
// (stdlib's _exit).
void LeaveLocked(BarrierObject* b, AfterUnlock& after) {
  if (--b->count > 0) return;
  if (b->state == BarrierState::kResetting || b->state == BarrierState::kDraining) {
    b->state = BarrierState::kFilling;
  }
  WakeEveryoneLocked(b, after);
}

// One attempt of wait(), under the mutex. Before arriving (number -1): wait
// while the barrier drains or resets; broken: BrokenBarrierError; else
// arrive with the next index, and the last arrival releases the round.
// After arriving: wait while it fills; then leave, with the index or, if it
// was reset or aborted meanwhile, BrokenBarrierError.
int WaitTryLocked(AwaiterObject* aw, AfterUnlock& after) {
  BarrierObject* b = AsBarrier(aw->owner);
  if (aw->number < 0) {
    if (b->state == BarrierState::kDraining || b->state == BarrierState::kResetting) {
      return 0;
    }
    if (b->state == BarrierState::kBroken) {
      after.raise = broken_barrier_error;
      after.raise_message = "Barrier aborted";
      return -1;
    }
    aw->number = b->count++;
    if (aw->number + 1 == b->release_at) {
      b->state = BarrierState::kDraining;
      WakeEveryoneLocked(b, after);
    }
  }
  if (b->state == BarrierState::kFilling) return 0;
  const bool broken =
      b->state == BarrierState::kBroken || b->state == BarrierState::kResetting;
  const Py_ssize_t index = std::exchange(aw->number, kLeft);
  LeaveLocked(b, after);
  if (broken) {
    after.raise = broken_barrier_error;
    after.raise_message = "Abort or reset of barrier";
    return -1;
  }
  after.result_for = aw;
  after.result_number = static_cast<std::uint64_t>(index);
  return 1;
}

// A wait that failed on its own (no memory for a waiter future) after it
// arrived still leaves, or the barrier would count it forever.
int LeaveIfFailed(AwaiterObject* aw, int rc) {
  if (rc >= 0 || aw->number < 0) return rc;
  BarrierObject* b = AsBarrier(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    aw->number = kLeft;
    LeaveLocked(b, after);
  }
  after.Run();  // Keeps the error.
  return rc;
}

int WaitStart(AwaiterObject* aw) {
  BarrierObject* b = AsBarrier(aw->owner);
  return LeaveIfFailed(
      aw, AwaiterTryOrQueue(aw, &b->base.mu, b->base.waiters, WaitTryLocked,
                        &b->base.loop));
}

// Woken by a notify_all: look again (the barrier may still be filling).
int WaitWoken(AwaiterObject* aw) {
  BarrierObject* b = AsBarrier(aw->owner);
  return LeaveIfFailed(
      aw, AwaiterLookAgain(aw, &b->base.mu, b->base.waiters, WaitTryLocked,
                       &b->base.loop));
}

// Cancelled or closed while waiting: one that had arrived leaves (stdlib's
// `finally: count -= 1; _exit()`).
void WaitAbandon(AwaiterObject* aw) {
  BarrierObject* b = AsBarrier(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    b->base.waiters->Remove(aw->fut);
    if (aw->number >= 0) {
      aw->number = kLeft;
      LeaveLocked(b, after);
    }
  }
  after.Run();
}

// reset() and abort(): done when first resumed, like stdlib's coroutines.
int ResetStart(AwaiterObject* aw) {
  BarrierObject* b = AsBarrier(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    b->state = b->count > 0 ? BarrierState::kResetting : BarrierState::kFilling;
    WakeEveryoneLocked(b, after);
  }
  return after.Run() < 0 ? -1 : 1;
}

int AbortStart(AwaiterObject* aw) {
  BarrierObject* b = AsBarrier(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    b->state = BarrierState::kBroken;
    WakeEveryoneLocked(b, after);
  }
  return after.Run() < 0 ? -1 : 1;
}

int NeverWoken(AwaiterObject*) { return 1; }
void NothingToAbandon(AwaiterObject*) {}

const AwaiterOps kBarrierWait = {"wait", WaitStart, WaitWoken, WaitAbandon};
const AwaiterOps kBarrierReset = {"reset", ResetStart, NeverWoken, NothingToAbandon};
const AwaiterOps kBarrierAbort = {"abort", AbortStart, NeverWoken, NothingToAbandon};

// --- the type ---------------------------------------------------------------------------

// The count that `index + 1 == parties` accepts: exact for an integer, and
// for another real number equal to an integer (2.0); none otherwise.
int ReleaseAt(PyObject* parties, Py_ssize_t* out) {
  *out = PY_SSIZE_T_MAX;
  PyObject* whole = PyLong_Check(parties) ? Py_NewRef(parties) : PyNumber_Long(parties);
  if (whole == nullptr) {
    PyErr_Clear();  // Not a number int() takes: no count equals it.
    return 0;
  }
  const int equal = PyObject_RichCompareBool(whole, parties, Py_EQ);
  if (equal < 0) {
    Py_DECREF(whole);
    return -1;
  }
  if (equal == 1) {
    const Py_ssize_t n = PyLong_AsSsize_t(whole);
    if (n == -1 && PyErr_Occurred()) {
      PyErr_Clear();  // Beyond any count.
    } else {
      *out = n;
    }
  }
  Py_DECREF(whole);
  return 0;
}

int Barrier_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"parties", nullptr};
  PyObject* parties;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Barrier", const_cast<char**>(kwlist),
                                   &parties)) {
    return -1;
  }
  PyObject* one = PyLong_FromLong(1);
  if (one == nullptr) return -1;
  const int below_one = PyObject_RichCompareBool(parties, one, Py_LT);
  Py_DECREF(one);
  if (below_one < 0) return -1;
  if (below_one == 1) {
    PyErr_SetString(PyExc_ValueError, "parties must be >= 1");
    return -1;
  }
  Py_ssize_t release_at;
  if (ReleaseAt(parties, &release_at) < 0) return -1;
  BarrierObject* b = AsBarrier(self);
  PyObject* old;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    b->state = BarrierState::kFilling;
    b->count = 0;
    b->release_at = release_at;
    old = b->parties;
    b->parties = Py_NewRef(parties);
  }
  Py_XDECREF(old);
  return 0;
}

int Barrier_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(AsBarrier(self)->parties);
  return PrimitiveTraverse(self, visit, arg);
}

int Barrier_clear(PyObject* self) {
  Py_CLEAR(AsBarrier(self)->parties);
  return PrimitiveClear(self);
}

void Barrier_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Py_CLEAR(AsBarrier(self)->parties);
  PrimitiveDealloc(self);
}

PyObject* Barrier_wait(PyObject* self, PyObject*) {
  return NewAwaiter(&kBarrierWait, self, Py_None, nullptr);
}

PyObject* Barrier_reset(PyObject* self, PyObject*) {
  return NewAwaiter(&kBarrierReset, self, Py_None, nullptr);
}

PyObject* Barrier_abort(PyObject* self, PyObject*) {
  return NewAwaiter(&kBarrierAbort, self, Py_None, nullptr);
}

PyObject* Barrier_aexit(PyObject*, PyObject* const*, Py_ssize_t) { return ReadyNone(); }

PyObject* Barrier_get_parties(PyObject* self, void*) {
  PyObject* parties = AsBarrier(self)->parties;
  return Py_NewRef(parties != nullptr ? parties : Py_None);
}

PyObject* Barrier_get_n_waiting(PyObject* self, void*) {
  BarrierObject* b = AsBarrier(self);
  Py_ssize_t n;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    n = b->state == BarrierState::kFilling ? b->count : 0;
  }
  return PyLong_FromSsize_t(n);
}

PyObject* Barrier_get_broken(PyObject* self, void*) {
  BarrierObject* b = AsBarrier(self);
  bool broken;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    broken = b->state == BarrierState::kBroken;
  }
  return PyBool_FromLong(broken);
}

PyObject* Barrier_get_state(PyObject* self, void*) {
  BarrierObject* b = AsBarrier(self);
  BarrierState state;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    state = b->state;
  }
  return PyUnicode_FromString(StateName(state));
}

PyObject* Barrier_get_count(PyObject* self, void*) {
  BarrierObject* b = AsBarrier(self);
  Py_ssize_t n;
  {
    PyMutexGuard g(b->base.mu, PyMutexGuard::kReentrant);
    n = b->count;
  }
  return PyLong_FromSsize_t(n);
}

PyMethodDef barrier_methods[] = {
    {"wait", Barrier_wait, METH_NOARGS,
     "wait($self, /)\n--\n\nWait (an awaitable) until `parties` tasks wait; returns this task's "
     "arrival index (0 to parties - 1)."},
    {"reset", Barrier_reset, METH_NOARGS,
     "reset($self, /)\n--\n\nBack to the empty state (an awaitable); tasks waiting get "
     "BrokenBarrierError."},
    {"abort", Barrier_abort, METH_NOARGS,
     "abort($self, /)\n--\n\nBreak the barrier (an awaitable): present and future waiters get "
     "BrokenBarrierError."},
    {"__aenter__", Barrier_wait, METH_NOARGS, nullptr},
    {"__aexit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Barrier_aexit)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef barrier_getset[] = {
    {"parties", Barrier_get_parties, nullptr, "Number of tasks a round needs.", nullptr},
    {"n_waiting", Barrier_get_n_waiting, nullptr, "Number of tasks waiting in the round.",
     nullptr},
    {"broken", Barrier_get_broken, nullptr, "True once aborted.", nullptr},
    {"_state", Barrier_get_state, nullptr, nullptr, nullptr},
    {"_count", Barrier_get_count, nullptr, nullptr, nullptr},
    {"_waiters", PrimitiveWaiters, nullptr, nullptr, nullptr},
    {"_loop", PrimitiveGetLoop, PrimitiveSetLoop, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot barrier_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PrimitiveNew)},
    {Py_tp_init, reinterpret_cast<void*>(Barrier_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Barrier_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Barrier_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Barrier_clear)},
    {Py_tp_methods, barrier_methods},
    {Py_tp_getset, barrier_getset},
    {0, nullptr},
};

PyType_Spec barrier_spec = {
    .name = "mt_asyncio._core.Barrier",
    .basicsize = sizeof(BarrierObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = barrier_slots,
};

}  // namespace

int RegisterBarrierType(PyObject* module) {
  PyObject* exceptions = PyImport_ImportModule("asyncio.exceptions");
  if (exceptions == nullptr) return -1;
  broken_barrier_error = PyObject_GetAttrString(exceptions, "BrokenBarrierError");
  Py_DECREF(exceptions);
  if (broken_barrier_error == nullptr) return -1;
  barrier_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &barrier_spec, nullptr));
  if (barrier_type == nullptr) return -1;
  return PyModule_AddObjectRef(module, "Barrier", reinterpret_cast<PyObject*>(barrier_type));
}

}  // namespace mt::pyext
