#include "pyext/src/sync/locks.h"

#include <utility>
#include <vector>

#include "pyext/src/future/future.h"
#include "pyext/src/sync/waiters.h"

namespace mt::pyext {
namespace {

PyTypeObject* lock_type = nullptr;
PyTypeObject* semaphore_type = nullptr;
PyTypeObject* bounded_semaphore_type = nullptr;
PyTypeObject* event_type = nullptr;

// --- the primitives -------------------------------------------------------------------

struct LockObject {
  PrimitiveObject base;
  bool locked;
  // The task that took it (CurrentTaskId; 0: taken outside a task), for
  // the diagnostics' holders and wait-for cycles. asyncio's Lock has no
  // owner: any task may release it, and that stays so.
  std::uint64_t owner_task;
};

struct SemaphoreObject {
  PrimitiveObject base;
  Py_ssize_t value;
  Py_ssize_t bound;  // BoundedSemaphore's initial value; -1 if unbounded.
};

struct EventObject {
  PrimitiveObject base;
  bool is_set;
};

LockObject* AsLock(PyObject* o) { return reinterpret_cast<LockObject*>(o); }
SemaphoreObject* AsSemaphore(PyObject* o) { return reinterpret_cast<SemaphoreObject*>(o); }
EventObject* AsEvent(PyObject* o) { return reinterpret_cast<EventObject*>(o); }

// --- the waits ------------------------------------------------------------------------

// Takes what an acquire()/wait() asks for without waiting, if asyncio's
// rules allow it now (nobody is queued ahead). Called under the mutex.
int LockTryLocked(AwaiterObject* aw, AfterUnlock&) {
  LockObject* lock = AsLock(aw->owner);
  if (lock->locked || !lock->base.waiters->AllCancelled()) return 0;
  lock->locked = true;
  lock->owner_task = CurrentTaskId();
  return 1;
}

int SemaphoreTryLocked(AwaiterObject* aw, AfterUnlock&) {
  SemaphoreObject* sem = AsSemaphore(aw->owner);
  if (sem->value <= 0 || !sem->base.waiters->AllCancelled()) return 0;
  --sem->value;
  return 1;
}

int EventTryLocked(AwaiterObject* aw, AfterUnlock&) { return AsEvent(aw->owner)->is_set ? 1 : 0; }

// Hands a free permit to the first waiter still pending; the permit leaves
// the counter before the waiter is woken, so a newcomer cannot take it in
// between. Returns whether a waiter was woken.
bool SemaphoreWakeNext(SemaphoreObject* sem) {
  for (;;) {
    FutureObject* next;
    {
      PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
      if (sem->value <= 0) return false;
      next = sem->base.waiters->FirstPending();
      if (next == nullptr) return false;
      --sem->value;
      Py_INCREF(next);
    }
    if (WakeWaiter(next, Py_True)) return true;
    // Cancelled meanwhile: its task will not count on the permit.
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    ++sem->value;
  }
}

// Wakes the lock's first waiter unless it is already on its way (done: it
// was woken, or cancelled and will pass the turn on itself).
void LockWakeFirst(LockObject* lock) {
  FutureObject* first = nullptr;
  {
    PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
    if (!lock->locked && !lock->base.waiters->empty()) {
      first = lock->base.waiters->front();
      if (FutureCurrentState(first) == FutureState::kPending) {
        Py_INCREF(first);
      } else {
        first = nullptr;
      }
    }
  }
  if (first != nullptr) WakeWaiter(first, Py_True);
}

int LockStart(AwaiterObject* aw) {
  PrimitiveObject* p = AsPrimitive(aw->owner);
  return AwaiterTryOrQueue(aw, &p->mu, p->waiters, LockTryLocked, &p->loop);
}

int SemaphoreStart(AwaiterObject* aw) {
  PrimitiveObject* p = AsPrimitive(aw->owner);
  return AwaiterTryOrQueue(aw, &p->mu, p->waiters, SemaphoreTryLocked, &p->loop);
}

int EventStart(AwaiterObject* aw) {
  PrimitiveObject* p = AsPrimitive(aw->owner);
  return AwaiterTryOrQueue(aw, &p->mu, p->waiters, EventTryLocked, &p->loop);
}

// Woken: the lock was handed to this waiter (nobody can take it before it
// leaves the queue, since a done waiter is still "ahead" of newcomers).
int LockWoken(AwaiterObject* aw) {
  LockObject* lock = AsLock(aw->owner);
  PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
  lock->base.waiters->Remove(aw->fut);
  lock->locked = true;
  lock->owner_task = CurrentTaskId();
  return 1;
}

// Woken: a permit was reserved for this waiter. Waiters that queued behind
// it (FIFO) while permits were free are woken now, as many as allowed.
int SemaphoreWoken(AwaiterObject* aw) {
  SemaphoreObject* sem = AsSemaphore(aw->owner);
  {
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    sem->base.waiters->Remove(aw->fut);
  }
  while (SemaphoreWakeNext(sem)) {
  }
  return 1;
}

int EventWoken(AwaiterObject* aw) {
  PrimitiveObject* p = AsPrimitive(aw->owner);
  PyMutexGuard g(p->mu, PyMutexGuard::kReentrant);
  p->waiters->Remove(aw->fut);
  return 1;
}

void LockAbandon(AwaiterObject* aw) {
  LockObject* lock = AsLock(aw->owner);
  {
    PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
    lock->base.waiters->Remove(aw->fut);
  }
  // Handed the lock but leaving (or a releaser lost the race to cancel):
  // the next waiter gets its turn.
  LockWakeFirst(lock);
}

void SemaphoreAbandon(AwaiterObject* aw) {
  SemaphoreObject* sem = AsSemaphore(aw->owner);
  {
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    sem->base.waiters->Remove(aw->fut);
    // Completed normally: a permit was reserved for us; give it back.
    if (FutureCurrentState(aw->fut) == FutureState::kFinished) ++sem->value;
  }
  while (SemaphoreWakeNext(sem)) {
  }
}

void EventAbandon(AwaiterObject* aw) { EventWoken(aw); }

const AwaiterOps kLockAcquire = {"acquire", LockStart, LockWoken, LockAbandon};
const AwaiterOps kSemaphoreAcquire = {"acquire", SemaphoreStart, SemaphoreWoken,
                                      SemaphoreAbandon};
const AwaiterOps kEventWait = {"wait", EventStart, EventWoken, EventAbandon};

// --- Lock -------------------------------------------------------------------------------

// Lock() and Event() take no arguments; the errors read as asyncio's
// (whose __init__ is a Python function taking only self).
template <const char* kName>
int InitNoArguments(PyObject*, PyObject* args, PyObject* kwargs) {
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
    Py_ssize_t pos = 0;
    PyObject* key;
    PyDict_Next(kwargs, &pos, &key, nullptr);
    PyErr_Format(PyExc_TypeError, "%s.__init__() got an unexpected keyword argument '%S'",
                 kName, key);
    return -1;
  }
  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_Format(PyExc_TypeError,
                 "%s.__init__() takes 1 positional argument but %zd were given", kName,
                 PyTuple_GET_SIZE(args) + 1);
    return -1;
  }
  return 0;
}
constexpr char kLockName[] = "Lock";
constexpr char kEventName[] = "Event";

// __aexit__: release now, then an awaiter that evaluates to None.
template <PyObject* (*Release)(PyObject*, PyObject*)>
PyObject* AexitByReleasing(PyObject* self, PyObject* const*, Py_ssize_t) {
  PyObject* r = Release(self, nullptr);
  if (r == nullptr) return nullptr;
  Py_DECREF(r);
  return ReadyNone();
}

PyObject* Lock_acquire(PyObject* self, PyObject*) {
  return NewAwaiter(&kLockAcquire, self, Py_True, nullptr);
}

PyObject* Lock_aenter(PyObject* self, PyObject*) {
  return NewAwaiter(&kLockAcquire, self, Py_None, nullptr);
}

PyObject* Lock_release(PyObject* self, PyObject*) {
  LockObject* lock = AsLock(self);
  bool was_locked;
  {
    PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
    was_locked = lock->locked;
    lock->locked = false;
    lock->owner_task = 0;
  }
  if (!was_locked) {  // Raised after unlocking: making the error allocates.
    PyErr_SetString(PyExc_RuntimeError, "Lock is not acquired.");
    return nullptr;
  }
  LockWakeFirst(lock);
  Py_RETURN_NONE;
}

PyObject* Lock_locked(PyObject* self, PyObject*) {
  LockObject* lock = AsLock(self);
  bool locked;
  {
    PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
    locked = lock->locked;
  }
  return PyBool_FromLong(locked);
}

PyObject* Lock_get_locked(PyObject* self, void*) { return Lock_locked(self, nullptr); }

// _owner_task: the id of the task holding the lock (0: free, or taken
// outside a task).
PyObject* Lock_get_owner_task(PyObject* self, void*) {
  LockObject* lock = AsLock(self);
  std::uint64_t owner;
  {
    PyMutexGuard g(lock->base.mu, PyMutexGuard::kReentrant);
    owner = lock->locked ? lock->owner_task : 0;
  }
  return PyLong_FromUnsignedLongLong(owner);
}

PyMethodDef lock_methods[] = {
    {"acquire", Lock_acquire, METH_NOARGS,
     "acquire($self, /)\n--\n\nAcquire the lock (an awaitable): waits in FIFO order; returns True."},
    {"release", Lock_release, METH_NOARGS,
     "release($self, /)\n--\n\nRelease the lock; RuntimeError if it is not held."},
    {"locked", Lock_locked, METH_NOARGS, "locked($self, /)\n--\n\nTrue if the lock is held."},
    {"__aenter__", Lock_aenter, METH_NOARGS, nullptr},
    {"__aexit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(AexitByReleasing<Lock_release>)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef lock_getset[] = {
    {"_locked", Lock_get_locked, nullptr, nullptr, nullptr},
    {"_owner_task", Lock_get_owner_task, nullptr, nullptr, nullptr},
    {"_waiters", PrimitiveWaiters, nullptr, nullptr, nullptr},
    {"_loop", PrimitiveGetLoop, PrimitiveSetLoop, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot lock_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PrimitiveNew)},
    {Py_tp_init, reinterpret_cast<void*>(InitNoArguments<kLockName>)},
    {Py_tp_dealloc, reinterpret_cast<void*>(PrimitiveDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(PrimitiveTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(PrimitiveClear)},
    {Py_tp_methods, lock_methods},
    {Py_tp_getset, lock_getset},
    {0, nullptr},
};

PyType_Spec lock_spec = {
    .name = "mt_asyncio._core.Lock",
    .basicsize = sizeof(LockObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = lock_slots,
};

// --- Semaphore and BoundedSemaphore ------------------------------------------------

int InitSemaphore(PyObject* self, PyObject* args, PyObject* kwargs, bool bounded) {
  static const char* kwlist[] = {"value", nullptr};
  Py_ssize_t value = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                   bounded ? "|n:BoundedSemaphore.__init__" : "|n:Semaphore.__init__",
                                   const_cast<char**>(kwlist), &value)) {
    return -1;
  }
  if (value < 0) {
    PyErr_SetString(PyExc_ValueError, "Semaphore initial value must be >= 0");
    return -1;
  }
  SemaphoreObject* sem = AsSemaphore(self);
  sem->value = value;
  sem->bound = bounded ? value : -1;
  return 0;
}

int Semaphore_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  return InitSemaphore(self, args, kwargs, false);
}

int BoundedSemaphore_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  return InitSemaphore(self, args, kwargs, true);
}

PyObject* Semaphore_acquire(PyObject* self, PyObject*) {
  return NewAwaiter(&kSemaphoreAcquire, self, Py_True, nullptr);
}

PyObject* Semaphore_aenter(PyObject* self, PyObject*) {
  return NewAwaiter(&kSemaphoreAcquire, self, Py_None, nullptr);
}

PyObject* Semaphore_release(PyObject* self, PyObject*) {
  SemaphoreObject* sem = AsSemaphore(self);
  bool over_released;
  {
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    over_released = sem->bound >= 0 && sem->value >= sem->bound;
    if (!over_released) ++sem->value;
  }
  if (over_released) {  // Raised after unlocking: making the error allocates.
    PyErr_SetString(PyExc_ValueError, "BoundedSemaphore released too many times");
    return nullptr;
  }
  SemaphoreWakeNext(sem);
  Py_RETURN_NONE;
}

PyObject* Semaphore_locked(PyObject* self, PyObject*) {
  SemaphoreObject* sem = AsSemaphore(self);
  bool locked;
  {
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    locked = sem->value == 0 || !sem->base.waiters->AllCancelled();
  }
  return PyBool_FromLong(locked);
}

PyObject* Semaphore_get_value(PyObject* self, void*) {
  SemaphoreObject* sem = AsSemaphore(self);
  Py_ssize_t value;
  {
    PyMutexGuard g(sem->base.mu, PyMutexGuard::kReentrant);
    value = sem->value;
  }
  return PyLong_FromSsize_t(value);
}

PyObject* Semaphore_get_bound(PyObject* self, void*) {
  SemaphoreObject* sem = AsSemaphore(self);
  if (sem->bound < 0) Py_RETURN_NONE;
  return PyLong_FromSsize_t(sem->bound);
}

PyMethodDef semaphore_methods[] = {
    {"acquire", Semaphore_acquire, METH_NOARGS,
     "acquire($self, /)\n--\n\nTake a permit (an awaitable): waits in FIFO order when none is free; returns True."},
    {"release", Semaphore_release, METH_NOARGS, "release($self, /)\n--\n\nGive a permit back."},
    {"locked", Semaphore_locked, METH_NOARGS,
     "locked($self, /)\n--\n\nTrue if acquire() would wait (no permit, or tasks queued ahead)."},
    {"__aenter__", Semaphore_aenter, METH_NOARGS, nullptr},
    {"__aexit__",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(AexitByReleasing<Semaphore_release>)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef semaphore_getset[] = {
    {"_value", Semaphore_get_value, nullptr, nullptr, nullptr},
    {"_bound_value", Semaphore_get_bound, nullptr, nullptr, nullptr},
    {"_waiters", PrimitiveWaiters, nullptr, nullptr, nullptr},
    {"_loop", PrimitiveGetLoop, PrimitiveSetLoop, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot semaphore_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PrimitiveNew)},
    {Py_tp_init, reinterpret_cast<void*>(Semaphore_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(PrimitiveDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(PrimitiveTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(PrimitiveClear)},
    {Py_tp_methods, semaphore_methods},
    {Py_tp_getset, semaphore_getset},
    {0, nullptr},
};

PyType_Spec semaphore_spec = {
    .name = "mt_asyncio._core.Semaphore",
    .basicsize = sizeof(SemaphoreObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = semaphore_slots,
};

PyType_Slot bounded_semaphore_slots[] = {
    {Py_tp_init, reinterpret_cast<void*>(BoundedSemaphore_init)},
    {Py_tp_traverse, reinterpret_cast<void*>(PrimitiveTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(PrimitiveClear)},
    {0, nullptr},
};

PyType_Spec bounded_semaphore_spec = {
    .name = "mt_asyncio._core.BoundedSemaphore",
    .basicsize = sizeof(SemaphoreObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = bounded_semaphore_slots,
};

// --- Event ------------------------------------------------------------------------------

PyObject* Event_wait(PyObject* self, PyObject*) {
  return NewAwaiter(&kEventWait, self, Py_True, nullptr);
}

PyObject* Event_set(PyObject* self, PyObject*) {
  EventObject* ev = AsEvent(self);
  std::vector<FutureObject*> to_wake;
  {
    PyMutexGuard g(ev->base.mu, PyMutexGuard::kReentrant);
    if (ev->is_set) Py_RETURN_NONE;
    ev->is_set = true;
    to_wake = ev->base.waiters->PendingSnapshot();
  }
  // Each woken task leaves the queue itself when it runs, as in asyncio.
  for (FutureObject* f : to_wake) WakeWaiter(f, Py_True);
  Py_RETURN_NONE;
}

PyObject* Event_clear(PyObject* self, PyObject*) {
  EventObject* ev = AsEvent(self);
  PyMutexGuard g(ev->base.mu, PyMutexGuard::kReentrant);
  ev->is_set = false;
  Py_RETURN_NONE;
}

PyObject* Event_is_set(PyObject* self, PyObject*) {
  EventObject* ev = AsEvent(self);
  bool set;
  {
    PyMutexGuard g(ev->base.mu, PyMutexGuard::kReentrant);
    set = ev->is_set;
  }
  return PyBool_FromLong(set);
}

PyObject* Event_get_value(PyObject* self, void*) { return Event_is_set(self, nullptr); }

PyMethodDef event_methods[] = {
    {"wait", Event_wait, METH_NOARGS,
     "wait($self, /)\n--\n\nWait until the flag is set (an awaitable); returns True."},
    {"set", Event_set, METH_NOARGS, "set($self, /)\n--\n\nSet the flag and wake every waiter."},
    {"clear", Event_clear, METH_NOARGS, "clear($self, /)\n--\n\nReset the flag."},
    {"is_set", Event_is_set, METH_NOARGS, "is_set($self, /)\n--\n\nTrue if the flag is set."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef event_getset[] = {
    {"_value", Event_get_value, nullptr, nullptr, nullptr},
    {"_waiters", PrimitiveWaiters, nullptr, nullptr, nullptr},
    {"_loop", PrimitiveGetLoop, PrimitiveSetLoop, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot event_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(PrimitiveNew)},
    {Py_tp_init, reinterpret_cast<void*>(InitNoArguments<kEventName>)},
    {Py_tp_dealloc, reinterpret_cast<void*>(PrimitiveDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(PrimitiveTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(PrimitiveClear)},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {0, nullptr},
};

PyType_Spec event_spec = {
    .name = "mt_asyncio._core.Event",
    .basicsize = sizeof(EventObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = event_slots,
};

PyTypeObject* MakeType(PyObject* module, PyType_Spec* spec, PyTypeObject* base) {
  return reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, spec, reinterpret_cast<PyObject*>(base)));
}

}  // namespace

int RegisterLockTypes(PyObject* module) {
  if (RegisterAwaiterType(module) < 0) return -1;
  lock_type = MakeType(module, &lock_spec, nullptr);
  semaphore_type = MakeType(module, &semaphore_spec, nullptr);
  if (lock_type == nullptr || semaphore_type == nullptr) return -1;
  bounded_semaphore_type = MakeType(module, &bounded_semaphore_spec, semaphore_type);
  event_type = MakeType(module, &event_spec, nullptr);
  if (bounded_semaphore_type == nullptr || event_type == nullptr) return -1;
  const std::pair<const char*, PyTypeObject*> exported[] = {
      {"Lock", lock_type},
      {"Semaphore", semaphore_type},
      {"BoundedSemaphore", bounded_semaphore_type},
      {"Event", event_type},
  };
  for (const auto& [name, type] : exported) {
    if (PyModule_AddObjectRef(module, name, reinterpret_cast<PyObject*>(type)) < 0) return -1;
  }
  return 0;
}

}  // namespace mt::pyext
