#include "pyext/src/sync/queues.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <new>
#include <utility>
#include <vector>

#include "pyext/src/future/future.h"
#include "pyext/src/sync/waiters.h"

namespace mt::pyext {
namespace {

PyTypeObject* queue_type = nullptr;
PyObject* queue_empty = nullptr;     // asyncio.QueueEmpty
PyObject* queue_full = nullptr;      // asyncio.QueueFull
PyObject* queue_shut_down = nullptr;  // asyncio.QueueShutDown
PyObject* str_put = nullptr;
PyObject* str_get = nullptr;
PyObject* str_init = nullptr;
PyObject* str_queue = nullptr;
PyObject* str_native_storage = nullptr;
PyObject* str_lifo = nullptr;

enum class Storage : unsigned char { kFifo, kLifo, kCustom };

struct QueueObject {
  PyObject_HEAD
  PyMutex mu;
  Storage storage;
  bool is_shutdown;
  Py_ssize_t maxsize;    // The limit in items; <= 0: unbounded.
  PyObject* maxsize_obj;  // What the caller passed, for `maxsize` (strong).
  Py_ssize_t unfinished;
  // Items ever taken and ever stored: a put()/get() written on top of an
  // overridden put_nowait()/get_nowait() tells a race it lost (another
  // task took the item or the slot it was woken for) from the subclass's
  // own QueueEmpty/QueueFull by whether these moved.
  std::uint64_t takes;
  std::uint64_t stores;
  // Heap-allocated: the object's memory comes from tp_alloc.
  std::deque<PyObject*>* items;  // kFifo/kLifo storage (strong references).
  WaiterQueue* getters;
  WaiterQueue* putters;
  WaiterQueue* joiners;
};

QueueObject* AsQueue(PyObject* o) { return reinterpret_cast<QueueObject*>(o); }

// --- storage (under the mutex) -------------------------------------------------------

// The number of items, or -1 with an error (custom storage only).
Py_ssize_t SizeLocked(QueueObject* q) {
  if (q->storage != Storage::kCustom) return static_cast<Py_ssize_t>(q->items->size());
  PyObject* storage = PyObject_GetAttr(reinterpret_cast<PyObject*>(q), str_queue);
  if (storage == nullptr) return -1;
  const Py_ssize_t n = PyObject_Size(storage);
  Py_DECREF(storage);
  return n;
}

// 1 full, 0 not, -1 error.
int FullLocked(QueueObject* q) {
  if (q->maxsize <= 0) return 0;
  const Py_ssize_t n = SizeLocked(q);
  if (n < 0) return -1;
  return n >= q->maxsize ? 1 : 0;
}

int PutItemLocked(QueueObject* q, PyObject* item) {
  if (q->storage != Storage::kCustom) {
    try {
      q->items->push_back(item);
    } catch (const std::bad_alloc&) {  // Not across the interpreter's C frames.
      PyErr_NoMemory();
      return -1;
    }
    Py_INCREF(item);
    return 0;
  }
  PyObject* r = PyObject_CallMethodOneArg(reinterpret_cast<PyObject*>(q), str_put, item);
  if (r == nullptr) return -1;
  Py_DECREF(r);  // _put's None.
  return 0;
}

// Removes the next item (new reference), or nullptr with an error. The
// queue is known not to be empty.
PyObject* GetItemLocked(QueueObject* q) {
  switch (q->storage) {
    case Storage::kFifo: {
      PyObject* item = q->items->front();
      q->items->pop_front();
      return item;
    }
    case Storage::kLifo: {
      PyObject* item = q->items->back();
      q->items->pop_back();
      return item;
    }
    case Storage::kCustom:
      break;
  }
  return PyObject_CallMethodNoArgs(reinterpret_cast<PyObject*>(q), str_get);
}

// One get: 1 with *item (new reference) and the next putter to wake in
// `after`; 0 if empty (after.raise is QueueShutDown when shut down); -1 on
// error.
int TakeLocked(QueueObject* q, PyObject** item, AfterUnlock& after) {
  const Py_ssize_t n = SizeLocked(q);
  if (n < 0) return -1;
  if (n == 0) {
    if (q->is_shutdown) after.raise = queue_shut_down;
    return 0;
  }
  *item = GetItemLocked(q);
  if (*item == nullptr) return -1;
  ++q->takes;
  after.wake = q->putters->PopFirstPending(after.discard);
  return 1;
}

// One put: 1 stored (the next getter to wake in `after`), 0 full, -1 error
// (after.raise is QueueShutDown once shut down).
int StoreLocked(QueueObject* q, PyObject* item, AfterUnlock& after) {
  if (q->is_shutdown) {
    after.raise = queue_shut_down;
    return -1;
  }
  const int full = FullLocked(q);
  if (full != 0) return full < 0 ? -1 : 0;
  if (PutItemLocked(q, item) < 0) return -1;
  ++q->stores;
  ++q->unfinished;  // join() waits again (asyncio clears its _finished event).
  after.wake = q->getters->PopFirstPending(after.discard);
  return 1;
}

// --- get(), put(), join() as awaiters --------------------------------------------------

int GetTryLocked(AwaiterObject* aw, AfterUnlock& after) {
  PyObject* item = nullptr;
  const int rc = TakeLocked(AsQueue(aw->owner), &item, after);
  if (rc == 0 && after.raise != nullptr) return -1;
  if (rc == 1) {
    after.drop_items.push_back(aw->value);  // Not dropped under the mutex.
    aw->value = item;
  }
  return rc;
}

int PutTryLocked(AwaiterObject* aw, AfterUnlock& after) {
  return StoreLocked(AsQueue(aw->owner), aw->arg, after);
}

int JoinTryLocked(AwaiterObject* aw, AfterUnlock&) {
  return AsQueue(aw->owner)->unfinished == 0 ? 1 : 0;
}

int GetStart(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  return AwaiterTryOrQueue(aw, &q->mu, q->getters, GetTryLocked);
}

int PutStart(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  return AwaiterTryOrQueue(aw, &q->mu, q->putters, PutTryLocked);
}

int JoinStart(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  return AwaiterTryOrQueue(aw, &q->mu, q->joiners, JoinTryLocked);
}

// A getter or putter is woken to look again, not handed an item or a slot:
// another task may have taken it first, and then it queues again.
int LookAgain(AwaiterObject* aw, WaiterQueue* line, TryLocked try_locked) {
  return AwaiterLookAgain(aw, &AsQueue(aw->owner)->mu, line, try_locked);
}

int GetWoken(AwaiterObject* aw) {
  return LookAgain(aw, AsQueue(aw->owner)->getters, GetTryLocked);
}

int PutWoken(AwaiterObject* aw) {
  return LookAgain(aw, AsQueue(aw->owner)->putters, PutTryLocked);
}

int JoinWoken(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
  q->joiners->Remove(aw->fut);
  return 1;
}

// Woken but leaving: an item (getter) or a free slot (putter) this waiter
// was told about goes to the next one in line.
void GetAbandon(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    q->getters->Remove(aw->fut);
    if (FutureCurrentState(aw->fut) == FutureState::kFinished) {
      const Py_ssize_t n = SizeLocked(q);
      if (n < 0) PyErr_Clear();  // Custom storage failed; nobody to tell.
      if (n > 0) after.wake = q->getters->PopFirstPending(after.discard);
    }
  }
  after.Run();
}

void PutAbandon(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  AfterUnlock after;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    q->putters->Remove(aw->fut);
    if (FutureCurrentState(aw->fut) == FutureState::kFinished) {
      const int full = FullLocked(q);
      if (full < 0) PyErr_Clear();
      if (full == 0) after.wake = q->putters->PopFirstPending(after.discard);
    }
  }
  after.Run();
}

void JoinAbandon(AwaiterObject* aw) { JoinWoken(aw); }

const AwaiterOps kQueueGet = {"get", GetStart, GetWoken, GetAbandon};
const AwaiterOps kQueuePut = {"put", PutStart, PutWoken, PutAbandon};
const AwaiterOps kQueueJoin = {"join", JoinStart, JoinWoken, JoinAbandon};

// --- waiting for room or an item without taking it -----------------------------------
//
// asyncio's put()/get() wait while full/empty, then call self.put_nowait()/
// self.get_nowait(). For a subclass that overrides those, queues.py writes
// put()/get() that way on these awaiters: they stand in line with the other
// putters/getters, are woken as those are, and pass a wake on when they
// leave without using it (the same abandon ops). QueueShutDown as put()/
// get() raise it.

// Both finish with the counter (stores, takes) as they saw it.
int Seen(AwaiterObject* aw, std::uint64_t counter, AfterUnlock& after) {
  after.result_for = aw;
  after.result_number = counter;
  return 1;
}

// As asyncio's put(): only a full queue that is shut down raises here; with
// room, put_nowait() decides (and raises QueueShutDown itself).
int RoomTryLocked(AwaiterObject* aw, AfterUnlock& after) {
  QueueObject* q = AsQueue(aw->owner);
  const int full = FullLocked(q);
  if (full == 0) return Seen(aw, q->stores, after);
  if (full < 0) return -1;
  if (q->is_shutdown) {
    after.raise = queue_shut_down;
    return -1;
  }
  return 0;
}

int ItemTryLocked(AwaiterObject* aw, AfterUnlock& after) {
  QueueObject* q = AsQueue(aw->owner);
  const Py_ssize_t n = SizeLocked(q);
  if (n != 0) return n < 0 ? -1 : Seen(aw, q->takes, after);
  if (q->is_shutdown) {
    after.raise = queue_shut_down;
    return -1;
  }
  return 0;
}

int RoomStart(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  return AwaiterTryOrQueue(aw, &q->mu, q->putters, RoomTryLocked);
}

int ItemStart(AwaiterObject* aw) {
  QueueObject* q = AsQueue(aw->owner);
  return AwaiterTryOrQueue(aw, &q->mu, q->getters, ItemTryLocked);
}

int RoomWoken(AwaiterObject* aw) {
  return LookAgain(aw, AsQueue(aw->owner)->putters, RoomTryLocked);
}

int ItemWoken(AwaiterObject* aw) {
  return LookAgain(aw, AsQueue(aw->owner)->getters, ItemTryLocked);
}

const AwaiterOps kQueueRoom = {"_wait_for_room", RoomStart, RoomWoken, PutAbandon};
const AwaiterOps kQueueItem = {"_wait_for_item", ItemStart, ItemWoken, GetAbandon};

// --- the type --------------------------------------------------------------------------

PyObject* Queue_new(PyTypeObject* type, PyObject*, PyObject*) {
  auto* q = reinterpret_cast<QueueObject*>(type->tp_alloc(type, 0));
  if (q == nullptr) return nullptr;
  q->items = new std::deque<PyObject*>();
  q->getters = new WaiterQueue();
  q->putters = new WaiterQueue();
  q->joiners = new WaiterQueue();
  return reinterpret_cast<PyObject*>(q);
}

// The class's `_native_storage`: "fifo", "lifo" or None (the class's own
// _init/_put/_get).
int StorageOf(PyObject* self, Storage* out) {
  PyObject* kind = PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(self)),
                                    str_native_storage);
  if (kind == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    *out = Storage::kFifo;
    return 0;
  }
  if (kind == Py_None) {
    *out = Storage::kCustom;
  } else {
    const int lifo = PyObject_RichCompareBool(kind, str_lifo, Py_EQ);
    if (lifo < 0) {
      Py_DECREF(kind);
      return -1;
    }
    *out = lifo ? Storage::kLifo : Storage::kFifo;
  }
  Py_DECREF(kind);
  return 0;
}

// The item limit for a `maxsize` asyncio accepts: any real number, full
// when qsize() >= maxsize (so 2.5 means 3 items, inf or <= 0 unbounded).
// A non-number is refused here with TypeError (asyncio fails later, at
// the first full() check).
int MaxsizeLimit(PyObject* maxsize, Py_ssize_t* limit) {
  if (PyLong_Check(maxsize)) {
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(maxsize, &overflow);
    if (n == -1 && PyErr_Occurred()) return -1;
    // Beyond Py_ssize_t no queue can fill up: unbounded.
    *limit = overflow > 0 || n > PY_SSIZE_T_MAX ? 0 : n <= 0 ? 0 : static_cast<Py_ssize_t>(n);
    return 0;
  }
  const double d = PyFloat_AsDouble(maxsize);
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "maxsize must be a real number, not %.100s",
                 Py_TYPE(maxsize)->tp_name);
    return -1;
  }
  if (!(d > 0) || d >= static_cast<double>(PY_SSIZE_T_MAX)) {
    *limit = 0;  // <= 0, nan or too large to reach: unbounded.
  } else {
    *limit = static_cast<Py_ssize_t>(std::ceil(d));
  }
  return 0;
}

int Queue_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"maxsize", nullptr};
  PyObject* maxsize_obj = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:Queue", const_cast<char**>(kwlist),
                                   &maxsize_obj)) {
    return -1;
  }
  QueueObject* q = AsQueue(self);
  PyObject* given = maxsize_obj != nullptr ? maxsize_obj : PyLong_FromLong(0);
  if (given == nullptr) return -1;
  if (maxsize_obj != nullptr) Py_INCREF(given);
  if (MaxsizeLimit(given, &q->maxsize) < 0) {
    Py_DECREF(given);
    return -1;
  }
  Py_XSETREF(q->maxsize_obj, given);
  if (StorageOf(self, &q->storage) < 0) return -1;
  if (q->storage == Storage::kCustom) {
    PyObject* r = PyObject_CallMethodOneArg(self, str_init, q->maxsize_obj);
    if (r == nullptr) return -1;
    Py_DECREF(r);
  }
  return 0;
}

int Queue_traverse(PyObject* self, visitproc visit, void* arg) {
  QueueObject* q = AsQueue(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(q->maxsize_obj);
  for (PyObject* item : *q->items) Py_VISIT(item);
  if (int r = q->getters->Traverse(visit, arg)) return r;
  if (int r = q->putters->Traverse(visit, arg)) return r;
  return q->joiners->Traverse(visit, arg);
}

int Queue_clear(PyObject* self) {
  QueueObject* q = AsQueue(self);
  Py_CLEAR(q->maxsize_obj);
  std::deque<PyObject*> items = std::move(*q->items);
  q->items->clear();
  for (PyObject* item : items) Py_DECREF(item);
  for (WaiterQueue* w : {q->getters, q->putters, q->joiners}) {
    for (FutureObject* f : w->TakeAll()) Py_DECREF(reinterpret_cast<PyObject*>(f));
  }
  return 0;
}

void Queue_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  Queue_clear(self);
  QueueObject* q = AsQueue(self);
  delete q->items;
  delete q->getters;
  delete q->putters;
  delete q->joiners;
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* Queue_get(PyObject* self, PyObject*) {
  return NewAwaiter(&kQueueGet, self, Py_None, nullptr);
}

PyObject* Queue_put(PyObject* self, PyObject* item) {
  return NewAwaiter(&kQueuePut, self, Py_None, item);
}

PyObject* Queue_join(PyObject* self, PyObject*) {
  return NewAwaiter(&kQueueJoin, self, Py_None, nullptr);
}

PyObject* Queue_wait_for_room(PyObject* self, PyObject*) {
  return NewAwaiter(&kQueueRoom, self, Py_None, nullptr);
}

PyObject* Queue_wait_for_item(PyObject* self, PyObject*) {
  return NewAwaiter(&kQueueItem, self, Py_None, nullptr);
}

PyObject* Queue_get_nowait(PyObject* self, PyObject*) {
  QueueObject* q = AsQueue(self);
  AfterUnlock after;
  PyObject* item = nullptr;
  int rc;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    rc = TakeLocked(q, &item, after);
  }
  if (rc == 0 && after.raise == nullptr) after.raise = queue_empty;
  if (after.Run() < 0 || rc < 0) return nullptr;
  return item;
}

PyObject* Queue_put_nowait(PyObject* self, PyObject* item) {
  QueueObject* q = AsQueue(self);
  AfterUnlock after;
  int rc;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    rc = StoreLocked(q, item, after);
  }
  if (rc == 0) after.raise = queue_full;
  if (after.Run() < 0 || rc < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Queue_task_done(PyObject* self, PyObject*) {
  QueueObject* q = AsQueue(self);
  std::vector<FutureObject*> joiners;
  bool too_many = false;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    if (q->unfinished <= 0) {
      too_many = true;
    } else if (--q->unfinished == 0) {
      joiners = q->joiners->PendingSnapshot();
    }
  }
  if (too_many) {
    PyErr_SetString(PyExc_ValueError, "task_done() called too many times");
    return nullptr;
  }
  // Each woken joiner leaves the list itself when it runs.
  for (FutureObject* f : joiners) WakeWaiter(f, Py_True);
  Py_RETURN_NONE;
}

PyObject* Queue_shutdown(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"immediate", nullptr};
  int immediate = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:shutdown", const_cast<char**>(kwlist),
                                   &immediate)) {
    return nullptr;
  }
  QueueObject* q = AsQueue(self);
  std::vector<PyObject*> dropped;
  std::deque<FutureObject*> to_wake;
  std::vector<FutureObject*> joiners;
  int rc = 0;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    q->is_shutdown = true;
    if (immediate) {
      // Items still queued count as done, so join() returns.
      for (;;) {
        const Py_ssize_t n = SizeLocked(q);
        if (n <= 0) {
          if (n < 0) rc = -1;
          break;
        }
        PyObject* item = GetItemLocked(q);
        if (item == nullptr) {
          rc = -1;
          break;
        }
        dropped.push_back(item);
        if (q->unfinished > 0) --q->unfinished;
      }
      if (q->unfinished == 0) joiners = q->joiners->PendingSnapshot();
    }
    // Every blocked get() and put() looks again and sees the shutdown.
    to_wake = q->getters->TakeAll();
    for (FutureObject* f : q->putters->TakeAll()) to_wake.push_back(f);
  }
  for (PyObject* item : dropped) Py_DECREF(item);
  for (FutureObject* f : to_wake) WakeWaiter(f, Py_None);
  for (FutureObject* f : joiners) WakeWaiter(f, Py_True);
  if (rc < 0) return nullptr;
  Py_RETURN_NONE;
}

// The number of items now, or -1 with an error.
Py_ssize_t Size(QueueObject* q) {
  PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
  return SizeLocked(q);
}

PyObject* Queue_qsize(PyObject* self, PyObject*) {
  const Py_ssize_t n = Size(AsQueue(self));
  return n < 0 ? nullptr : PyLong_FromSsize_t(n);
}

PyObject* Queue_empty(PyObject* self, PyObject*) {
  const Py_ssize_t n = Size(AsQueue(self));
  return n < 0 ? nullptr : PyBool_FromLong(n == 0);
}

PyObject* Queue_full(PyObject* self, PyObject*) {
  QueueObject* q = AsQueue(self);
  int full;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    full = FullLocked(q);
  }
  if (full < 0) return nullptr;
  return PyBool_FromLong(full);
}

// What a native queue holds, oldest first (a snapshot; repr and `_queue`).
PyObject* Queue_items(PyObject* self, PyObject*) {
  QueueObject* q = AsQueue(self);
  if (q->storage == Storage::kCustom) {
    PyErr_SetString(PyExc_TypeError, "_items() is for queues with native storage");
    return nullptr;
  }
  std::vector<PyObject*> items;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    items.assign(q->items->begin(), q->items->end());
    for (PyObject* item : items) Py_INCREF(item);
  }
  // The list is built after unlocking: it allocates through Python.
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
  if (list == nullptr) {
    for (PyObject* item : items) Py_DECREF(item);
    return nullptr;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), items[i]);
  }
  return list;
}

// asyncio's Queue._wakeup_next(waiters): a subclass that took an item
// (or made room) itself calls it with self._getters or self._putters (a
// snapshot list here), as asyncpg's pool queue does. Wakes the first
// future in `waiters` still waiting on this queue, under the queue's
// mutex, so it cannot race a get()/put() waking the same one.
PyObject* Queue_wakeup_next(PyObject* self, PyObject* waiters) {
  QueueObject* q = AsQueue(self);
  PyObject* seq = PySequence_Fast(waiters, "_wakeup_next() needs a sequence of waiters");
  if (seq == nullptr) return nullptr;
  FutureObject* chosen = nullptr;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n && chosen == nullptr; ++i) {
      auto* fut = reinterpret_cast<FutureObject*>(PySequence_Fast_GET_ITEM(seq, i));
      if (q->getters->TakeIfPending(fut) || q->putters->TakeIfPending(fut)) chosen = fut;
    }
  }
  Py_DECREF(seq);
  if (chosen != nullptr) WakeWaiter(chosen, Py_None);  // Consumes the queue's reference.
  Py_RETURN_NONE;
}

PyObject* Queue_get_maxsize(PyObject* self, void*) {
  PyObject* given = AsQueue(self)->maxsize_obj;
  return given != nullptr ? Py_NewRef(given) : PyLong_FromLong(0);
}

PyObject* Queue_get_unfinished(PyObject* self, void*) {
  QueueObject* q = AsQueue(self);
  Py_ssize_t n;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    n = q->unfinished;
  }
  return PyLong_FromSsize_t(n);
}

// Setting `_unfinished_tasks` (asyncio's attribute is a plain int that
// tests and subclasses assign): a count of zero releases join() as the
// last task_done() does.
int Queue_set_unfinished(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete _unfinished_tasks");
    return -1;
  }
  const Py_ssize_t n = PyLong_AsSsize_t(value);
  if (n == -1 && PyErr_Occurred()) return -1;
  QueueObject* q = AsQueue(self);
  std::vector<FutureObject*> joiners;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    q->unfinished = n;
    if (n <= 0) joiners = q->joiners->PendingSnapshot();
  }
  for (FutureObject* f : joiners) WakeWaiter(f, Py_True);
  return 0;
}

template <std::uint64_t QueueObject::*kCounter>
PyObject* Queue_get_counter(PyObject* self, void*) {
  QueueObject* q = AsQueue(self);
  std::uint64_t n;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    n = q->*kCounter;
  }
  return PyLong_FromUnsignedLongLong(n);
}

PyObject* Queue_get_is_shutdown(PyObject* self, void*) {
  QueueObject* q = AsQueue(self);
  bool shut;
  {
    PyMutexGuard g(q->mu, PyMutexGuard::kReentrant);
    shut = q->is_shutdown;
  }
  return PyBool_FromLong(shut);
}

PyObject* Queue_get_getters(PyObject* self, void*) {
  return WaitersAsList(&AsQueue(self)->mu, AsQueue(self)->getters);
}

PyObject* Queue_get_putters(PyObject* self, void*) {
  return WaitersAsList(&AsQueue(self)->mu, AsQueue(self)->putters);
}

// Docstrings open with a signature line ("name($self, ...)\n--\n\n"), so
// inspect.signature() reads them as it reads stdlib's.
PyMethodDef queue_methods[] = {
    {"get", Queue_get, METH_NOARGS,
     "get($self, /)\n--\n\n"
     "Remove and return an item (an awaitable), waiting while the queue is empty."},
    {"put", Queue_put, METH_O,
     "put($self, item, /)\n--\n\n"
     "Put an item (an awaitable), waiting while the queue is full."},
    {"join", Queue_join, METH_NOARGS,
     "join($self, /)\n--\n\n"
     "Wait (an awaitable) until every item put has been marked done."},
    {"get_nowait", Queue_get_nowait, METH_NOARGS,
     "get_nowait($self, /)\n--\n\n"
     "Remove and return an item now; QueueEmpty if there is none."},
    {"put_nowait", Queue_put_nowait, METH_O,
     "put_nowait($self, item, /)\n--\n\n"
     "Put an item now; QueueFull if there is no room."},
    {"task_done", Queue_task_done, METH_NOARGS,
     "task_done($self, /)\n--\n\nOne item taken earlier is fully processed."},
    {"shutdown",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Queue_shutdown)),
     METH_VARARGS | METH_KEYWORDS,
     "shutdown($self, /, immediate=False)\n--\n\n"
     "Refuse new items and wake blocked put()s; with immediate=True also drop "
     "what is queued and wake blocked get()s."},
    // Unlike on a one-thread loop, the three below are snapshots: tasks on
    // other workers may put or get between the answer and its use.
    {"qsize", Queue_qsize, METH_NOARGS,
     "qsize($self, /)\n--\n\n"
     "Number of items in the queue: a snapshot (other workers may change it "
     "at once)."},
    {"empty", Queue_empty, METH_NOARGS,
     "empty($self, /)\n--\n\n"
     "True if the queue is empty: a snapshot (other workers may change it "
     "at once)."},
    {"full", Queue_full, METH_NOARGS,
     "full($self, /)\n--\n\n"
     "True if there are maxsize items in the queue: a snapshot (other "
     "workers may change it at once)."},
    {"_items", Queue_items, METH_NOARGS, "A snapshot of the items, oldest first."},
    {"_wakeup_next", Queue_wakeup_next, METH_O,
     "Wake the first of `waiters` (_getters or _putters) still waiting."},
    {"_wait_for_room", Queue_wait_for_room, METH_NOARGS,
     "Wait (an awaitable) in line with put()s until the queue is not full; "
     "returns _stores as it was then."},
    {"_wait_for_item", Queue_wait_for_item, METH_NOARGS,
     "Wait (an awaitable) in line with get()s until the queue is not empty; "
     "returns _takes as it was then."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef queue_getset[] = {
    {"maxsize", Queue_get_maxsize, nullptr, "Number of items allowed in the queue.",
     nullptr},
    {"_maxsize", Queue_get_maxsize, nullptr, nullptr, nullptr},
    {"_unfinished_tasks", Queue_get_unfinished, Queue_set_unfinished, nullptr, nullptr},
    {"_is_shutdown", Queue_get_is_shutdown, nullptr, nullptr, nullptr},
    {"_takes", Queue_get_counter<&QueueObject::takes>, nullptr, nullptr, nullptr},
    {"_stores", Queue_get_counter<&QueueObject::stores>, nullptr, nullptr, nullptr},
    {"_getters", Queue_get_getters, nullptr, nullptr, nullptr},
    {"_putters", Queue_get_putters, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot queue_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Queue_new)},
    {Py_tp_init, reinterpret_cast<void*>(Queue_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Queue_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Queue_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Queue_clear)},
    {Py_tp_methods, queue_methods},
    {Py_tp_getset, queue_getset},
    {0, nullptr},
};

PyType_Spec queue_spec = {
    .name = "mt_asyncio._core.Queue",
    .basicsize = sizeof(QueueObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = queue_slots,
};

}  // namespace

int RegisterQueueType(PyObject* module) {
  PyObject* queues = PyImport_ImportModule("asyncio.queues");
  if (queues == nullptr) return -1;
  queue_empty = PyObject_GetAttrString(queues, "QueueEmpty");
  queue_full = PyObject_GetAttrString(queues, "QueueFull");
  queue_shut_down = PyObject_GetAttrString(queues, "QueueShutDown");
  Py_DECREF(queues);
  if (queue_empty == nullptr || queue_full == nullptr || queue_shut_down == nullptr) {
    return -1;
  }
  str_put = PyUnicode_InternFromString("_put");
  str_get = PyUnicode_InternFromString("_get");
  str_init = PyUnicode_InternFromString("_init");
  str_queue = PyUnicode_InternFromString("_queue");
  str_native_storage = PyUnicode_InternFromString("_native_storage");
  str_lifo = PyUnicode_InternFromString("lifo");
  if (!str_put || !str_get || !str_init || !str_queue || !str_native_storage || !str_lifo) {
    return -1;
  }
  queue_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &queue_spec, nullptr));
  if (queue_type == nullptr) return -1;
  return PyModule_AddObjectRef(module, "Queue", reinterpret_cast<PyObject*>(queue_type));
}

}  // namespace mt::pyext
