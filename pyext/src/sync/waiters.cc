#include "pyext/src/sync/waiters.h"

#include <algorithm>
#include <utility>

#include "pyext/src/common/shared_refcount.h"

namespace mt::pyext {

namespace {

PyObject* get_running_loop = nullptr;  // asyncio.events.get_running_loop
PyTypeObject* awaiter_type = nullptr;
PyObject* ready_none = nullptr;

enum Phase : unsigned char { kStart, kWaiting, kDone };

PyObject* AsObject(FutureObject* f) { return reinterpret_cast<PyObject*>(f); }

}  // namespace

// --- WaiterQueue --------------------------------------------------------------------

void WaiterQueue::Push(FutureObject* fut) {
  futs_.push_back(reinterpret_cast<FutureObject*>(Py_NewRef(AsObject(fut))));
}

void WaiterQueue::Remove(FutureObject* fut) {
  auto it = std::find(futs_.begin(), futs_.end(), fut);
  if (it == futs_.end()) return;
  futs_.erase(it);
  Py_DECREF(AsObject(fut));  // Never the last reference (see the class comment).
}

bool WaiterQueue::AllCancelled() const {
  for (FutureObject* f : futs_) {
    if (FutureCurrentState(f) != FutureState::kCancelled) return false;
  }
  return true;
}

FutureObject* WaiterQueue::FirstPending() const {
  for (FutureObject* f : futs_) {
    if (FutureCurrentState(f) == FutureState::kPending) return f;
  }
  return nullptr;
}

FutureObject* WaiterQueue::PopFirstPending(std::vector<FutureObject*>& discard) {
  while (!futs_.empty()) {
    FutureObject* f = futs_.front();
    futs_.pop_front();
    if (FutureCurrentState(f) == FutureState::kPending) return f;
    discard.push_back(f);
  }
  return nullptr;
}

bool WaiterQueue::TakeIfPending(FutureObject* fut) {
  auto it = std::find(futs_.begin(), futs_.end(), fut);
  if (it == futs_.end() || FutureCurrentState(fut) != FutureState::kPending) return false;
  futs_.erase(it);
  return true;
}

std::vector<FutureObject*> WaiterQueue::PendingSnapshot() const {
  std::vector<FutureObject*> out;
  for (FutureObject* f : futs_) {
    if (FutureCurrentState(f) == FutureState::kPending) {
      out.push_back(reinterpret_cast<FutureObject*>(Py_NewRef(AsObject(f))));
    }
  }
  return out;
}

PyObject* WaitersAsList(PyMutex* mu, const WaiterQueue* queue) {
  std::vector<FutureObject*> futs;
  {
    PyMutexGuard g(*mu, PyMutexGuard::kReentrant);
    queue->ForEach([&](FutureObject* f) {
      futs.push_back(reinterpret_cast<FutureObject*>(Py_NewRef(AsObject(f))));
    });
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(futs.size()));
  if (list == nullptr) {
    DropAll(futs);
    return nullptr;
  }
  for (std::size_t i = 0; i < futs.size(); ++i) {
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), AsObject(futs[i]));
  }
  return list;
}

int WaiterQueue::Traverse(visitproc visit, void* arg) const {
  for (FutureObject* f : futs_) Py_VISIT(AsObject(f));
  return 0;
}

void DropAll(std::vector<FutureObject*>& refs) {
  for (FutureObject* f : refs) Py_DECREF(AsObject(f));
  refs.clear();
}

bool WakeWaiter(FutureObject* fut, PyObject* value) {
  const int rc = FutureTrySetResult(fut, value);
  if (rc < 0) PyErr_WriteUnraisable(AsObject(fut));
  Py_DECREF(AsObject(fut));
  return rc != 0;
}

int AfterUnlock::Run() {
  PyObject* saved = PyErr_GetRaisedException();
  if (wake != nullptr) WakeWaiter(std::exchange(wake, nullptr), Py_None);
  for (FutureObject* f : wake_all) WakeWaiter(f, Py_None);
  wake_all.clear();
  DropAll(discard);
  for (PyObject* item : drop_items) Py_DECREF(item);
  drop_items.clear();
  if (saved != nullptr) {
    PyErr_SetRaisedException(saved);
    return 0;
  }
  if (raise != nullptr) {
    if (raise_message != nullptr) {
      PyErr_SetString(raise, raise_message);
    } else {
      PyErr_SetNone(raise);
    }
    return -1;
  }
  if (result_for != nullptr) {
    PyObject* value = PyLong_FromUnsignedLongLong(result_number);
    if (value == nullptr) return -1;
    AwaiterObject* aw = std::exchange(result_for, nullptr);
    Py_SETREF(aw->value, value);
  }
  return 0;
}

// --- the primitives' common part ----------------------------------------------------

PyObject* PrimitiveNew(PyTypeObject* type, PyObject*, PyObject*) {
  auto* self = reinterpret_cast<PrimitiveObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->waiters = new WaiterQueue();
  return reinterpret_cast<PyObject*>(self);
}

int PrimitiveTraverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(AsPrimitive(self)->loop);
  // The GC runs this with the world stopped: no lock needed (or allowed).
  return AsPrimitive(self)->waiters->Traverse(visit, arg);
}

int PrimitiveClear(PyObject* self) {
  for (FutureObject* f : AsPrimitive(self)->waiters->TakeAll()) Py_DECREF(AsObject(f));
  Py_CLEAR(AsPrimitive(self)->loop);
  return 0;
}

void PrimitiveDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  PrimitiveClear(self);
  delete AsPrimitive(self)->waiters;
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* PrimitiveGetLoop(PyObject* self, void*) {
  PrimitiveObject* p = AsPrimitive(self);
  PyObject* loop;
  {
    PyMutexGuard g(p->mu, PyMutexGuard::kReentrant);
    loop = p->loop == nullptr ? Py_None : p->loop;
    Py_INCREF(loop);
  }
  return loop;
}

int PrimitiveSetLoop(PyObject* self, PyObject* value, void*) {
  PrimitiveObject* p = AsPrimitive(self);
  PyObject* new_loop = (value == nullptr || value == Py_None) ? nullptr : Py_NewRef(value);
  PyObject* old;
  {
    PyMutexGuard g(p->mu, PyMutexGuard::kReentrant);
    old = p->loop;
    p->loop = new_loop;
  }
  Py_XDECREF(old);  // After unlocking: a finalizer may run.
  return 0;
}

PyObject* PrimitiveWaiters(PyObject* self, void*) {
  PrimitiveObject* p = AsPrimitive(self);
  return WaitersAsList(&p->mu, p->waiters);
}

// --- the awaiter ------------------------------------------------------------------------

namespace {

AwaiterObject* AsAwaiter(PyObject* o) { return reinterpret_cast<AwaiterObject*>(o); }

// Leaves the waiting phase because of an exception, close() or collection.
// Keeps any error that is set.
void StopWaiting(AwaiterObject* aw) {
  PyObject* saved = PyErr_GetRaisedException();
  aw->phase = kDone;
  Py_CLEAR(aw->inner);
  // Still pending only when the coroutine is closed or collected mid-wait
  // (a task steps again only once its waiter is done). A waker may have
  // picked it already: cancelling settles whether it was handed the turn.
  if (FutureCurrentState(aw->fut) == FutureState::kPending &&
      FutureCancel(aw->fut, Py_None) < 0) {
    PyErr_WriteUnraisable(reinterpret_cast<PyObject*>(aw));
  }
  aw->ops->abandon(aw);
  Py_CLEAR(aw->fut);
  PyErr_SetRaisedException(saved);
}

PySendResult Awaiter_am_send(PyObject* self, PyObject*, PyObject** out) {
  AwaiterObject* aw = AsAwaiter(self);
  *out = nullptr;
  if (aw->ops == nullptr) {
    // Stateless: a shared ready awaiter may be awaited any number of times.
    *out = Py_NewRef(aw->value);
    return PYGEN_RETURN;
  }
  int rc = 0;
  if (aw->phase == kStart) {
    rc = aw->ops->start(aw);
    aw->phase = rc == 0 ? kWaiting : kDone;
  } else if (aw->phase == kDone) {
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
    return PYGEN_ERROR;
  }
  while (rc == 0) {
    PyObject* yielded = nullptr;
    const PySendResult r = PyIter_Send(aw->inner, Py_None, &yielded);
    if (r == PYGEN_NEXT) {
      *out = yielded;
      return PYGEN_NEXT;
    }
    if (r == PYGEN_ERROR) {
      StopWaiting(aw);
      return PYGEN_ERROR;
    }
    Py_DECREF(yielded);
    Py_CLEAR(aw->inner);
    rc = aw->ops->woken(aw);  // 0: queued again with a new future.
    if (rc != 0) {
      aw->phase = kDone;
      Py_CLEAR(aw->fut);
    }
  }
  if (rc < 0) return PYGEN_ERROR;
  *out = Py_NewRef(aw->value);
  return PYGEN_RETURN;
}

PyObject* Awaiter_iternext(PyObject* self) {
  PyObject* out;
  const PySendResult result = Awaiter_am_send(self, Py_None, &out);
  return IterNextSlotFromSend(result, out);
}

PyObject* Awaiter_send(PyObject* self, PyObject*) {
  PyObject* out;
  const PySendResult result = Awaiter_am_send(self, Py_None, &out);
  return IterNextFromSend(result, out);
}

// Ends the awaiter early (throw() or close()): a wait in progress is left
// as a coroutine's except/finally would leave it. The shared ready
// awaiter stays reusable.
void Finish(AwaiterObject* aw) {
  if (aw->ops == nullptr) return;
  if (aw->phase == kWaiting) {
    StopWaiting(aw);
  } else {
    aw->phase = kDone;
  }
}

// Like a coroutine's throw(): the exception comes out at the await, after
// the wait has been left.
PyObject* Awaiter_throw(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Finish(AsAwaiter(self));
  RaiseThrowArguments(args, nargs);
  return nullptr;
}

PyObject* Awaiter_close(PyObject* self, PyObject*) {
  Finish(AsAwaiter(self));
  Py_RETURN_NONE;
}

// A coroutine collected while it waited (never closed) must not keep a
// place in the queue, nor a turn it was handed.
void Awaiter_finalize(PyObject* self) {
  AwaiterObject* aw = AsAwaiter(self);
  if (aw->ops != nullptr && aw->phase == kWaiting) StopWaiting(aw);
}

int Awaiter_traverse(PyObject* self, visitproc visit, void* arg) {
  AwaiterObject* aw = AsAwaiter(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(aw->owner);
  Py_VISIT(aw->value);
  Py_VISIT(aw->arg);
  Py_VISIT(reinterpret_cast<PyObject*>(aw->fut));
  Py_VISIT(aw->inner);
  return 0;
}

int Awaiter_clear(PyObject* self) {
  AwaiterObject* aw = AsAwaiter(self);
  Py_CLEAR(aw->inner);
  Py_CLEAR(aw->fut);
  Py_CLEAR(aw->owner);
  Py_CLEAR(aw->value);
  Py_CLEAR(aw->arg);
  return 0;
}

void Awaiter_dealloc(PyObject* self) {
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return;  // Resurrected.
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  Awaiter_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* Awaiter_repr(PyObject* self) {
  AwaiterObject* aw = AsAwaiter(self);
  if (aw->ops == nullptr) return PyUnicode_FromString("<ready awaiter>");
  return PyUnicode_FromFormat("<%s awaiter of %R>", aw->ops->name, aw->owner);
}

// _owner: the primitive waited on (None once ready), for the diagnostics.
PyObject* Awaiter_get_owner(PyObject* self, void*) {
  AwaiterObject* aw = AsAwaiter(self);
  return Py_NewRef(aw->owner != nullptr ? aw->owner : Py_None);
}

PyGetSetDef awaiter_getset[] = {
    {"_owner", Awaiter_get_owner, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef awaiter_methods[] = {
    {"send", Awaiter_send, METH_O, nullptr},
    {"throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Awaiter_throw)),
     METH_FASTCALL, nullptr},
    {"close", Awaiter_close, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot awaiter_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Awaiter_dealloc)},
    {Py_tp_finalize, reinterpret_cast<void*>(Awaiter_finalize)},
    {Py_tp_traverse, reinterpret_cast<void*>(Awaiter_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Awaiter_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Awaiter_repr)},
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(Awaiter_iternext)},
    {Py_tp_methods, awaiter_methods},
    {Py_tp_getset, awaiter_getset},
    {Py_am_await, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_am_send, reinterpret_cast<void*>(Awaiter_am_send)},
    {0, nullptr},
};

PyType_Spec awaiter_spec = {
    .name = "mt_asyncio._core.PrimitiveAwaiter",
    .basicsize = sizeof(AwaiterObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = awaiter_slots,
};

}  // namespace

PyObject* NewAwaiter(const AwaiterOps* ops, PyObject* owner, PyObject* value, PyObject* arg) {
  auto* aw = PyObject_GC_New(AwaiterObject, awaiter_type);
  if (aw == nullptr) return nullptr;
  aw->ops = ops;
  aw->phase = kStart;
  aw->owner = Py_XNewRef(owner);
  aw->value = Py_NewRef(value);
  aw->arg = Py_XNewRef(arg);
  aw->fut = nullptr;
  aw->inner = nullptr;
  aw->number = -1;
  PyObject_GC_Track(aw);
  return reinterpret_cast<PyObject*>(aw);
}

PyObject* ReadyNone() { return Py_NewRef(ready_none); }

FutureObject* NewWaiterFuture(PyObject* owner, PyMutex* mu, PyObject** bound_loop) {
  PyObject* loop = PyObject_CallNoArgs(get_running_loop);
  if (loop == nullptr) return nullptr;
  if (bound_loop != nullptr) {
    bool same;
    {
      PyMutexGuard g(*mu, PyMutexGuard::kReentrant);
      if (*bound_loop == nullptr) *bound_loop = Py_NewRef(loop);
      same = *bound_loop == loop;
    }
    if (!same) {
      Py_DECREF(loop);
      PyErr_Format(PyExc_RuntimeError, "%R is bound to a different event loop", owner);
      return nullptr;
    }
  }
  PyObject* fut = FutureCreate(loop);
  Py_DECREF(loop);
  return reinterpret_cast<FutureObject*>(fut);
}

PyObject* AwaitIter(PyObject* awaitable) {
  PyAsyncMethods* am = Py_TYPE(awaitable)->tp_as_async;
  if (am == nullptr || am->am_await == nullptr) {
    PyErr_Format(PyExc_TypeError, "object %.100s can't be used in 'await' expression",
                 Py_TYPE(awaitable)->tp_name);
    return nullptr;
  }
  return am->am_await(awaitable);
}

int AwaiterTryOrQueue(AwaiterObject* aw, PyMutex* mu, WaiterQueue* queue,
                      TryLocked try_locked, PyObject** bound_loop) {
  {
    AfterUnlock after;
    int rc;
    {
      PyMutexGuard g(*mu, PyMutexGuard::kReentrant);
      rc = try_locked(aw, after);
    }
    if (after.Run() < 0) return -1;
    if (rc != 0) return rc;
  }
  FutureObject* fut = NewWaiterFuture(aw->owner, mu, bound_loop);
  if (fut == nullptr) return -1;
  PyObject* inner = FutureAwaitIter(fut);
  if (inner == nullptr) {
    Py_DECREF(AsObject(fut));
    return -1;
  }
  // The task that waits here usually runs next on its waker's worker,
  // which then drops the awaiter too (the future and its iterator are
  // shared when the iterator yields): see ShareRefcount.
  ShareRefcount(reinterpret_cast<PyObject*>(aw));
  AfterUnlock after;
  int rc;
  {
    PyMutexGuard g(*mu, PyMutexGuard::kReentrant);
    rc = try_locked(aw, after);  // The state may have changed meanwhile.
    if (rc == 0) queue->Push(fut);
  }
  const int ran = after.Run();
  if (rc != 0 || ran < 0) {
    Py_DECREF(inner);
    Py_DECREF(AsObject(fut));
    return ran < 0 ? -1 : rc;
  }
  aw->fut = fut;
  aw->inner = inner;
  return 0;
}

int AwaiterLookAgain(AwaiterObject* aw, PyMutex* mu, WaiterQueue* queue,
                     TryLocked try_locked, PyObject** bound_loop) {
  {
    PyMutexGuard g(*mu, PyMutexGuard::kReentrant);
    queue->Remove(aw->fut);
  }
  Py_CLEAR(aw->fut);
  return AwaiterTryOrQueue(aw, mu, queue, try_locked, bound_loop);
}

int RegisterAwaiterType(PyObject* module) {
  PyObject* events = PyImport_ImportModule("asyncio.events");
  if (events == nullptr) return -1;
  get_running_loop = PyObject_GetAttrString(events, "get_running_loop");
  Py_DECREF(events);
  if (get_running_loop == nullptr) return -1;
  awaiter_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &awaiter_spec, nullptr));
  if (awaiter_type == nullptr) return -1;
  ready_none = NewAwaiter(nullptr, nullptr, Py_None, nullptr);
  if (ready_none == nullptr) return -1;
  return PyModule_AddObjectRef(module, "PrimitiveAwaiter",
                               reinterpret_cast<PyObject*>(awaiter_type));
}

}  // namespace mt::pyext
