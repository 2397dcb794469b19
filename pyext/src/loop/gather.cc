#include "pyext/src/loop/gather.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/future/awaited_by.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/task.h"

namespace mt::pyext {
namespace {

// gather()'s outer future. Its children report to it through a native done
// callback that runs on whichever worker completes them, so the count of
// children still running is atomic and the last one to finish builds the
// result list; completing the outer future tolerates losing a race to a
// concurrent cancel or to a sibling's exception.
struct GatheringFutureObject {
  FutureObject base;
  PyObject* children;  // list, in argument order (duplicates repeated).
  std::atomic<Py_ssize_t> remaining;  // Distinct children not yet done.
  bool return_exceptions;
  // Whether gather() itself was cancelled must be decided exactly when the
  // last child finishes, but a child may finish (on another worker) while
  // cancel() is still asking the others. So cancel() registers itself, and
  // a last child that finishes meanwhile leaves the decision to it. Guarded
  // by `mu` (zero-initialized is unlocked); never held across a call into
  // Python.
  PyMutex mu;
  int cancels_in_flight;
  bool cancel_requested;  // Some child took a cancel() of ours.
  PyObject* deferred_last;  // The last child, if its decision was deferred.
  // The task that called gather(), or nullptr: each child still pending
  // is awaited by it (call-graph introspection, awaited_by.h).
  PyObject* awaiting_task;
};

PyTypeObject* gathering_future_type = nullptr;
PyObject* get_event_loop = nullptr;     // asyncio.events.get_event_loop
PyObject* get_running_loop = nullptr;   // asyncio.events._get_running_loop
PyObject* ensure_future = nullptr;      // mt_asyncio.tasks.ensure_future
PyObject* str_log_destroy_pending = nullptr;
PyObject* str_cancel = nullptr;
PyObject* str_msg = nullptr;
PyObject* kwnames_msg = nullptr;
PyObject* kwnames_loop = nullptr;

GatheringFutureObject* AsGathering(PyObject* o) {
  return reinterpret_cast<GatheringFutureObject*>(o);
}

bool IsOurFuture(PyObject* o) { return PyObject_TypeCheck(o, FutureType()); }

// Completes `outer` unless it is done already (a lost race is not an error).
void Complete(PyObject* outer, PyObject* result, PyObject* exc) {
  auto* fut = reinterpret_cast<FutureObject*>(outer);
  const int rc = exc != nullptr ? FutureSetException(fut, exc) : FutureSetResult(fut, result);
  if (rc < 0) {
    if (PyErr_ExceptionMatches(InvalidStateErrorType())) {
      PyErr_Clear();
    } else {
      PyErr_WriteUnraisable(outer);
    }
  }
}

// Completes `outer` with the exception `err` (stolen). A null `err` means
// building it failed: that error goes to sys.unraisablehook.
void Fail(PyObject* outer, PyObject* err) {
  if (err == nullptr) {
    PyErr_WriteUnraisable(outer);
    return;
  }
  Complete(outer, nullptr, err);
  Py_DECREF(err);
}

// A child's outcome without raising: cancelled, or its exception (marked
// retrieved), or its result. Works for foreign futures through their
// methods. 0, or -1 with an error.
int ChildOutcome(PyObject* child, bool* cancelled, PyObject** result, PyObject** exc) {
  if (IsOurFuture(child)) {
    if (FutureGetOutcome(reinterpret_cast<FutureObject*>(child), cancelled, result,
                         exc) < 0) {
      PyErr_SetString(InvalidStateErrorType(), "Result is not ready.");
      return -1;
    }
    return 0;
  }
  *result = *exc = nullptr;
  PyObject* c = PyObject_CallMethod(child, "cancelled", nullptr);
  if (c == nullptr) return -1;
  const int is_cancelled = PyObject_IsTrue(c);
  Py_DECREF(c);
  if (is_cancelled < 0) return -1;
  *cancelled = is_cancelled != 0;
  if (*cancelled) return 0;
  PyObject* e = PyObject_CallMethod(child, "exception", nullptr);
  if (e == nullptr) return -1;
  if (e != Py_None) {
    *exc = e;
    return 0;
  }
  Py_DECREF(e);
  *result = PyObject_CallMethod(child, "result", nullptr);
  return *result != nullptr ? 0 : -1;
}

PyObject* ChildCancelledError(PyObject* child) {
  if (IsOurFuture(child)) {
    return FutureMakeCancelledError(reinterpret_cast<FutureObject*>(child));
  }
  return PyObject_CallMethod(child, "_make_cancelled_error", nullptr);
}

// The entry for a cancelled child in a return_exceptions result list: a
// fresh CancelledError with the cancel message ('' if none), as stdlib.
PyObject* CancelledEntry(PyObject* child) {
  PyObject* msg = IsOurFuture(child)
                      ? FutureCancelMessage(reinterpret_cast<FutureObject*>(child))
                      : PyObject_GetAttrString(child, "_cancel_message");
  if (msg == nullptr) return nullptr;
  PyObject* entry;
  if (msg == Py_None) {
    PyObject* empty = PyUnicode_FromString("");
    entry = empty != nullptr ? PyObject_CallOneArg(CancelledErrorType(), empty) : nullptr;
    Py_XDECREF(empty);
  } else {
    entry = PyObject_CallOneArg(CancelledErrorType(), msg);
  }
  Py_DECREF(msg);
  return entry;
}

PyObject* BuildResults(GatheringFutureObject* g) {
  const Py_ssize_t n = PyList_GET_SIZE(g->children);
  PyObject* results = PyList_New(n);
  if (results == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* child = PyList_GET_ITEM(g->children, i);
    bool cancelled;
    PyObject* res;
    PyObject* exc;
    if (ChildOutcome(child, &cancelled, &res, &exc) < 0) {
      Py_DECREF(results);
      return nullptr;
    }
    PyObject* entry = cancelled ? CancelledEntry(child) : exc != nullptr ? exc : res;
    if (entry == nullptr) {
      Py_DECREF(results);
      return nullptr;
    }
    PyList_SET_ITEM(results, i, entry);
  }
  return results;
}

// Every child is done: the result list, or the CancelledError of `last`
// when a cancel() of gather() was taken by some child (propagated whatever
// return_exceptions says, as stdlib does).
void Finish(PyObject* outer, PyObject* last, bool cancel_requested) {
  if (cancel_requested) {
    Fail(outer, ChildCancelledError(last));
    return;
  }
  PyObject* results = BuildResults(AsGathering(outer));
  if (results == nullptr) {
    Fail(outer, PyErr_GetRaisedException());
    return;
  }
  Complete(outer, results, nullptr);
  Py_DECREF(results);
}

// A child is done: stdlib's _done_callback, safe when siblings finish on
// other workers at the same moment.
void ChildDone(PyObject* outer, PyObject* child) {
  GatheringFutureObject* g = AsGathering(outer);
  const bool last = g->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1;
  bool cancelled;
  PyObject* res;
  PyObject* exc;
  if (ChildOutcome(child, &cancelled, &res, &exc) < 0) {
    PyErr_WriteUnraisable(outer);
    return;
  }
  Py_XDECREF(res);
  if (FutureIsDone(&g->base)) {
    Py_XDECREF(exc);  // Looked at, so never reported as unretrieved.
    return;
  }
  if (!g->return_exceptions) {
    if (cancelled || exc != nullptr) {
      // A child's cancellation is raised in the awaiting task, not taken
      // as gather() itself being cancelled (stdlib's choice too).
      Fail(outer, cancelled ? ChildCancelledError(child) : exc);
      return;
    }
  }
  Py_XDECREF(exc);
  if (!last) return;
  bool defer;
  bool cancel_requested;
  {
    PyMutexGuard lock(g->mu);
    defer = g->cancels_in_flight > 0;
    if (defer) g->deferred_last = Py_NewRef(child);
    cancel_requested = g->cancel_requested;
  }
  if (!defer) Finish(outer, child, cancel_requested);
}

void NativeChildDone(PyObject* outer, FutureObject* child) {
  ChildDone(outer, reinterpret_cast<PyObject*>(child));
}

// Done callback for foreign children (e.g. a stdlib Future on our loop).
PyObject* Gathering_child_done(PyObject* self, PyObject* child) {
  ChildDone(self, child);
  Py_RETURN_NONE;
}

PyObject* Gathering_cancel(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"msg", nullptr};
  PyObject* msg = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:cancel", const_cast<char**>(kwlist),
                                   &msg)) {
    return nullptr;
  }
  GatheringFutureObject* g = AsGathering(self);
  if (FutureIsDone(&g->base)) Py_RETURN_FALSE;
  {
    PyMutexGuard lock(g->mu);
    ++g->cancels_in_flight;
  }
  bool any = false;
  bool failed = false;
  PyObject* children = Py_NewRef(g->children);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(children) && !failed; ++i) {
    PyObject* call_args[] = {PyList_GET_ITEM(children, i), msg};
    PyObject* r = PyObject_VectorcallMethod(
        str_cancel, call_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames_msg);
    const int took = r == nullptr ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (took < 0) failed = true;
    any |= took > 0;
  }
  Py_DECREF(children);
  // Settle: record the outcome, and finish for a last child that completed
  // while we were asking (its decision waited for ours).
  PyObject* last = nullptr;
  bool cancel_requested;
  {
    PyMutexGuard lock(g->mu);
    g->cancel_requested |= any;
    if (--g->cancels_in_flight == 0) last = std::exchange(g->deferred_last, nullptr);
    cancel_requested = g->cancel_requested;
  }
  if (last != nullptr) {
    PyObject* saved = failed ? PyErr_GetRaisedException() : nullptr;
    Finish(self, last, cancel_requested);
    Py_DECREF(last);
    if (saved != nullptr) PyErr_SetRaisedException(saved);
  }
  if (failed) return nullptr;
  return PyBool_FromLong(any);
}

PyObject* Gathering_get_children(PyObject* self, void*) {
  return Py_NewRef(AsGathering(self)->children);
}

PyObject* Gathering_get_cancel_requested(PyObject* self, void*) {
  GatheringFutureObject* g = AsGathering(self);
  PyMutexGuard lock(g->mu);
  return PyBool_FromLong(g->cancel_requested);
}

int Gathering_set_cancel_requested(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete _cancel_requested");
    return -1;
  }
  const int on = PyObject_IsTrue(value);
  if (on < 0) return -1;
  GatheringFutureObject* g = AsGathering(self);
  PyMutexGuard lock(g->mu);
  g->cancel_requested = on != 0;
  return 0;
}

int Gathering_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(AsGathering(self)->children);
  Py_VISIT(AsGathering(self)->deferred_last);
  Py_VISIT(AsGathering(self)->awaiting_task);
  return FutureType()->tp_traverse(self, visit, arg);
}

int Gathering_clear(PyObject* self) {
  Py_CLEAR(AsGathering(self)->children);
  Py_CLEAR(AsGathering(self)->deferred_last);
  Py_CLEAR(AsGathering(self)->awaiting_task);
  return FutureType()->tp_clear(self);
}

void Gathering_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return;
  Py_CLEAR(AsGathering(self)->children);
  Py_CLEAR(AsGathering(self)->deferred_last);
  Py_CLEAR(AsGathering(self)->awaiting_task);
  PyObject_GC_Track(self);  // The base dealloc untracks again.
  FutureType()->tp_dealloc(self);
}

PyMethodDef gathering_methods[] = {
    {"cancel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Gathering_cancel)),
     METH_VARARGS | METH_KEYWORDS, "Cancel the children; True if any took it."},
    {"_child_done", Gathering_child_done, METH_O,
     "Done callback for a child that is not an mt_asyncio future."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef gathering_getset[] = {
    {"_children", Gathering_get_children, nullptr, nullptr, nullptr},
    {"_cancel_requested", Gathering_get_cancel_requested, Gathering_set_cancel_requested,
     nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot gathering_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Gathering_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Gathering_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Gathering_clear)},
    {Py_tp_methods, gathering_methods},
    {Py_tp_getset, gathering_getset},
    {Py_tp_doc, const_cast<char*>("The future gather() returns; cancelling it "
                                  "cancels the children.")},
    {0, nullptr},
};

PyType_Spec gathering_spec = {
    .name = "mt_asyncio._core._GatheringFuture",
    .basicsize = sizeof(GatheringFutureObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = gathering_slots,
};

// ensure_future(arg, loop=loop) with the common cases in C: our futures as
// they are, native coroutines wrapped by our loop's create_task.
// `overrides` caches LoopOverridesCreateTask(loop) for one gather() call
// (-2: not asked yet).
PyObject* EnsureFuture(PyObject* arg, PyObject* loop, int& overrides) {
  if (IsOurFuture(arg)) {
    PyObject* fut_loop = reinterpret_cast<FutureObject*>(arg)->loop;
    if (loop != Py_None && fut_loop != loop) {
      PyErr_SetString(PyExc_ValueError,
                      "The future belongs to a different loop than the one "
                      "specified as the loop argument");
      return nullptr;
    }
    return Py_NewRef(arg);
  }
  if (PyCoro_CheckExact(arg) && IsLoop(loop)) {
    if (overrides == -2) overrides = LoopOverridesCreateTask(loop);
    if (overrides < 0) return nullptr;
    return overrides == 0 ? LoopCreateTaskCore(loop, arg)
                          : PyObject_CallMethod(loop, "create_task", "O", arg);
  }
  PyObject* call_args[] = {arg, loop};
  return PyObject_Vectorcall(ensure_future, call_args, 1, kwnames_loop);
}

PyObject* LoopOf(PyObject* fut) {
  if (IsOurFuture(fut)) return Py_NewRef(reinterpret_cast<FutureObject*>(fut)->loop);
  return PyObject_CallMethod(fut, "get_loop", nullptr);
}

PyObject* GatherEmpty() {
  PyObject* loop = PyObject_CallNoArgs(get_event_loop);
  if (loop == nullptr) return nullptr;
  PyObject* outer = PyObject_CallMethod(loop, "create_future", nullptr);
  Py_DECREF(loop);
  if (outer == nullptr) return nullptr;
  PyObject* empty = PyList_New(0);
  PyObject* r = empty != nullptr ? PyObject_CallMethod(outer, "set_result", "O", empty)
                                 : nullptr;
  Py_XDECREF(empty);
  if (r == nullptr) {
    Py_DECREF(outer);
    return nullptr;
  }
  Py_DECREF(r);
  return outer;
}

// Registers `outer` with a distinct child; a child that is done already
// reports right away (the last such call may complete `outer` before
// gather() returns, as stdlib does for children that finished eagerly).
int Attach(PyObject* outer, PyObject* child) {
  if (IsOurFuture(child)) {
    auto* fut = reinterpret_cast<FutureObject*>(child);
    if (FutureAddNativeCallback(fut, outer, NativeChildDone) == 1) ChildDone(outer, child);
    return 0;
  }
  PyObject* cb = PyObject_GetAttrString(outer, "_child_done");
  if (cb == nullptr) return -1;
  PyObject* r = PyObject_CallMethod(child, "add_done_callback", "O", cb);
  Py_DECREF(cb);
  if (r == nullptr) return -1;
  Py_DECREF(r);
  return 0;
}

// Whether `arg` hashes and compares by identity (coroutines, futures and
// tasks do), so that a pointer comparison says what a dict lookup would.
bool IdentityKeyed(PyObject* arg) {
  PyTypeObject* type = Py_TYPE(arg);
  return type->tp_hash == PyBaseObject_Type.tp_hash &&
         type->tp_richcompare == PyBaseObject_Type.tp_richcompare;
}

// gather()'s "each distinct argument once" (stdlib keys a dict by the
// argument). Coroutines, futures and tasks hash and compare by identity,
// so for them a pointer table answers the same without Python hashing or
// the dict's per-operation locking; arguments of other types (a custom
// __eq__ could merge two of them) use a dict as stdlib does.
class DistinctArgs {
 public:
  ~DistinctArgs() { Py_XDECREF(by_value_); }

  // The future already made for `arg` (borrowed), or nullptr; -1 on error.
  int Find(PyObject* arg, PyObject** fut) {
    *fut = nullptr;
    if (IdentityKeyed(arg)) {
      if (slots_.empty()) return 0;
      *fut = Probe(slots_, arg).fut;
      return 0;
    }
    if (by_value_ == nullptr) return 0;
    PyObject* found;
    if (PyDict_GetItemRef(by_value_, arg, &found) < 0) return -1;
    *fut = found;
    Py_XDECREF(found);  // `children` holds it.
    return 0;
  }
  // Records `fut` (borrowed; `children` holds it) for `arg`.
  int Add(PyObject* arg, PyObject* fut) {
    if (IdentityKeyed(arg)) {
      Slot& slot = SlotFor(arg);
      if (slot.arg == nullptr) ++used_;
      slot.arg = arg;
      slot.fut = fut;
      return 0;
    }
    if (by_value_ == nullptr && (by_value_ = PyDict_New()) == nullptr) return -1;
    return PyDict_SetItem(by_value_, arg, fut);
  }

 private:
  struct Slot {
    PyObject* arg = nullptr;
    PyObject* fut = nullptr;
  };
  // The slot holding `arg`, or the empty one where it would go (linear
  // probing; the table grows to stay at most half full).
  Slot& SlotFor(PyObject* arg) {
    if ((used_ + 1) * 2 > slots_.size()) Grow();
    return Probe(slots_, arg);
  }
  static Slot& Probe(std::vector<Slot>& slots, PyObject* arg) {
    const std::size_t mask = slots.size() - 1;
    std::size_t i = (reinterpret_cast<std::uintptr_t>(arg) >> 4) * 0x9E3779B97F4A7C15ull >> 20;
    for (;; ++i) {
      Slot& slot = slots[i & mask];
      if (slot.arg == arg || slot.arg == nullptr) return slot;
    }
  }
  void Grow() {
    std::vector<Slot> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (const Slot& slot : slots_) {
      if (slot.arg != nullptr) Probe(bigger, slot.arg) = slot;
    }
    slots_.swap(bigger);
  }

  std::vector<Slot> slots_;
  std::size_t used_ = 0;
  PyObject* by_value_ = nullptr;  // dict, created on first use.
};

// True when no argument can equal another: all are identity-keyed and no
// object is passed twice. The common case (one fresh coroutine per
// argument) then needs no lookup per argument; sorting the addresses is
// far cheaper than a table too large for the cache (one_million).
bool AllDistinctByIdentity(PyObject* const* args, Py_ssize_t nargs) {
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (!IdentityKeyed(args[i])) return false;
  }
  if (nargs <= 16) {  // The usual gather(a, b, ...): no allocation.
    for (Py_ssize_t i = 1; i < nargs; ++i) {
      if (std::find(args, args + i, args[i]) != args + i) return false;
    }
    return true;
  }
  // Objects made one after another mostly have ascending addresses (an
  // allocator hands out a page's blocks in order: a million fresh
  // coroutines fall into a few dozen ascending runs), so the addresses are
  // sorted by merging their ascending runs, O(n log runs), rather than
  // sorted from scratch, O(n log n).
  std::vector<PyObject*> sorted(args, args + nargs);
  std::vector<std::size_t> runs{0};  // Where each ascending run starts.
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i] == sorted[i - 1]) return false;
    if (sorted[i] < sorted[i - 1]) runs.push_back(i);
  }
  runs.push_back(sorted.size());
  while (runs.size() > 2) {
    std::vector<std::size_t> merged{0};
    std::size_t j = 0;
    for (; j + 2 < runs.size(); j += 2) {
      std::inplace_merge(sorted.begin() + runs[j], sorted.begin() + runs[j + 1],
                         sorted.begin() + runs[j + 2]);
      merged.push_back(runs[j + 2]);
    }
    if (j + 1 < runs.size()) merged.push_back(runs.back());  // Odd run out.
    runs.swap(merged);
  }
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

PyObject* Module_gather(PyObject*, PyObject* const* args, Py_ssize_t nargsf,
                        PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  int return_exceptions = 0;
  if (kwnames != nullptr) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, i);
      if (PyUnicode_CompareWithASCIIString(key, "return_exceptions") != 0) {
        PyErr_Format(PyExc_TypeError,
                     "gather() got an unexpected keyword argument '%U'", key);
        return nullptr;
      }
      return_exceptions = PyObject_IsTrue(args[nargs + i]);
      if (return_exceptions < 0) return nullptr;
    }
  }
  if (nargs == 0) return GatherEmpty();

  // 3.14 wraps everything for the running loop (a future of another loop
  // is refused); before, the first argument's loop was taken.
  PyObject* loop = PY_VERSION_HEX >= 0x030E0000 ? PyObject_CallNoArgs(get_running_loop)
                                                : Py_NewRef(Py_None);
  if (loop == nullptr) return nullptr;
  PyObject* children = PyList_New(nargs);
  DistinctArgs seen;
  std::vector<PyObject*> distinct;  // Borrowed from `children`.
  int overrides_create_task = -2;
  distinct.reserve(nargs);
  auto fail = [&]() -> PyObject* {
    Py_XDECREF(children);
    Py_DECREF(loop);
    return nullptr;
  };
  if (children == nullptr) return fail();
  // Children start once the scope ends: after every callback is attached.
  HeldFirstSteps held_first_steps;
  const bool all_distinct = AllDistinctByIdentity(args, nargs);
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* arg = args[i];
    PyObject* fut = nullptr;
    if (!all_distinct && seen.Find(arg, &fut) < 0) return fail();
    if (fut != nullptr) {
      Py_INCREF(fut);
    } else {
      fut = EnsureFuture(arg, loop, overrides_create_task);
      if (fut == nullptr) return fail();
      if (loop == Py_None) {
        PyObject* l = LoopOf(fut);
        if (l == nullptr) {
          Py_DECREF(fut);
          return fail();
        }
        Py_SETREF(loop, l);
      }
      // Our tasks never warn about being destroyed pending; a foreign
      // wrapper gets the flag stdlib sets on the tasks it makes.
      if (fut != arg && !IsOurFuture(fut) &&
          PyObject_SetAttr(fut, str_log_destroy_pending, Py_False) < 0) {
        PyErr_Clear();
      }
      if (!all_distinct && seen.Add(arg, fut) < 0) {
        Py_DECREF(fut);
        return fail();
      }
      distinct.push_back(fut);
    }
    PyList_SET_ITEM(children, i, fut);
  }

  auto* g = reinterpret_cast<GatheringFutureObject*>(
      gathering_future_type->tp_alloc(gathering_future_type, 0));
  if (g == nullptr) return fail();
  PyObject* outer = reinterpret_cast<PyObject*>(g);
  g->base.state = FutureState::kPending;
  g->base.loop = loop;  // Takes our reference.
  loop = nullptr;
  g->children = children;
  children = nullptr;
  g->remaining.store(static_cast<Py_ssize_t>(distinct.size()));
  g->return_exceptions = return_exceptions != 0;
  g->awaiting_task = Py_XNewRef(CurrentTask());
  for (PyObject* child : distinct) {
    if (Attach(outer, child) < 0) {
      Py_DECREF(outer);
      return nullptr;
    }
  }
  return outer;
}

PyObject* Module_set_gather_fallback(PyObject*, PyObject* fn) {
  Py_XSETREF(ensure_future, Py_NewRef(fn));
  Py_RETURN_NONE;
}

PyMethodDef module_functions[] = {
    {"gather",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Module_gather)),
     METH_FASTCALL | METH_KEYWORDS,
     "gather(*aws, return_exceptions=False): run awaitables concurrently; the "
     "result is the list of their results in argument order."},
    {"_set_gather_fallback", Module_set_gather_fallback, METH_O,
     "The ensure_future gather() uses for what it does not wrap itself."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterGather(PyObject* module) {
  PyObject* events = PyImport_ImportModule("asyncio.events");
  PyObject* tasks = PyImport_ImportModule("asyncio.tasks");
  if (events == nullptr || tasks == nullptr) {
    Py_XDECREF(events);
    Py_XDECREF(tasks);
    return -1;
  }
  get_event_loop = PyObject_GetAttrString(events, "get_event_loop");
  get_running_loop = PyObject_GetAttrString(events, "_get_running_loop");
  // Until mt_asyncio.tasks installs its own (stdlib's would make stdlib
  // tasks on a stdlib loop, which is still right for that loop).
  ensure_future = PyObject_GetAttrString(tasks, "ensure_future");
  Py_DECREF(events);
  Py_DECREF(tasks);
  str_log_destroy_pending = PyUnicode_InternFromString("_log_destroy_pending");
  str_cancel = PyUnicode_InternFromString("cancel");
  str_msg = PyUnicode_InternFromString("msg");
  kwnames_msg = str_msg != nullptr ? PyTuple_Pack(1, str_msg) : nullptr;
  PyObject* str_loop = PyUnicode_InternFromString("loop");
  kwnames_loop = str_loop != nullptr ? PyTuple_Pack(1, str_loop) : nullptr;
  Py_XDECREF(str_loop);
  if (!get_event_loop || !get_running_loop || !ensure_future || !kwnames_msg ||
      !kwnames_loop) {
    return -1;
  }
  gathering_future_type = reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(
      module, &gathering_spec, reinterpret_cast<PyObject*>(FutureType())));
  if (gathering_future_type == nullptr) return -1;
  if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
  // A gather() child's callback names the task that called gather().
  RegisterAwaitingTaskOf(NativeChildDone,
                         [](PyObject* outer) { return AsGathering(outer)->awaiting_task; });
  return PyModule_AddObjectRef(module, "_GatheringFuture",
                               reinterpret_cast<PyObject*>(gathering_future_type));
}

}  // namespace mt::pyext
