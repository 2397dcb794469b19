#include "pyext/src/future/awaited_by.h"

#include <array>

#include "absl/container/inlined_vector.h"

namespace mt::pyext {
namespace {

struct NativeAwaiting {
  NativeCallback native = nullptr;
  AwaitingTaskOf resolve = nullptr;
};
// Filled at module setup, read-only afterwards: the task waker and
// gather()'s child callback.
std::array<NativeAwaiting, 4> native_awaiting;

// Stdlib's future_add_to_awaited_by / future_discard_from_awaited_by, for
// pairs that are not both ours (stdlib ignores pairs that are not both its
// own); nullptr where the interpreter's asyncio has none (before 3.14).
PyObject* add_fallback = nullptr;
PyObject* discard_fallback = nullptr;

AwaitingTaskOf ResolverFor(NativeCallback native) {
  for (const NativeAwaiting& entry : native_awaiting) {
    if (entry.native == native) return entry.resolve;
  }
  return nullptr;
}

bool IsOurs(PyObject* o) { return PyObject_TypeCheck(o, FutureType()); }

// Both keep stdlib's representation and its edge cases: one waiter is
// held as itself, a second turns the entry into a set (even when it is
// the same waiter again), and a set stays a set when emptied (so
// `_asyncio_awaited_by` is then frozenset(), not None). The caller holds
// fut's critical section and a reference to `waiter`, so dropping ours
// cannot finalize anything under the lock.
int AddLocked(FutureObject* fut, PyObject* waiter) {
  if (fut->awaited_by == nullptr) {
    fut->awaited_by = Py_NewRef(waiter);
    return 0;
  }
  if (fut->awaited_by_is_set) return PySet_Add(fut->awaited_by, waiter);
  PyObject* set = PySet_New(nullptr);
  if (set == nullptr) return -1;
  if (PySet_Add(set, fut->awaited_by) < 0 || PySet_Add(set, waiter) < 0) {
    Py_DECREF(set);
    return -1;
  }
  Py_SETREF(fut->awaited_by, set);
  fut->awaited_by_is_set = true;
  return 0;
}

int DiscardLocked(FutureObject* fut, PyObject* waiter) {
  if (fut->awaited_by == nullptr) return 0;
  if (fut->awaited_by == waiter) {
    Py_CLEAR(fut->awaited_by);
    return 0;
  }
  if (fut->awaited_by_is_set) return PySet_Discard(fut->awaited_by, waiter) < 0 ? -1 : 0;
  return 0;
}

// future_add_to_awaited_by / future_discard_from_awaited_by: `op` on two
// futures of ours, under the first one's critical section; `fallback`
// (stdlib's function, if any) for any other pair.
PyObject* ApplyToPair(const char* name, int (*op)(FutureObject*, PyObject*),
                      PyObject* fallback, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "%s expected 2 arguments, got %zd", name, nargs);
    return nullptr;
  }
  if (!IsOurs(args[0]) || !IsOurs(args[1])) {
    if (fallback == nullptr) Py_RETURN_NONE;
    return PyObject_Vectorcall(fallback, args, 2, nullptr);
  }
  int rc;
  Py_BEGIN_CRITICAL_SECTION(args[0]);
  rc = op(reinterpret_cast<FutureObject*>(args[0]), args[1]);
  Py_END_CRITICAL_SECTION();
  if (rc < 0) return nullptr;
  Py_RETURN_NONE;
}

PyObject* Module_future_add_to_awaited_by(PyObject*, PyObject* const* args,
                                          Py_ssize_t nargs) {
  return ApplyToPair("future_add_to_awaited_by", AddLocked, add_fallback, args, nargs);
}

PyObject* Module_future_discard_from_awaited_by(PyObject*, PyObject* const* args,
                                                Py_ssize_t nargs) {
  return ApplyToPair("future_discard_from_awaited_by", DiscardLocked, discard_fallback,
                     args, nargs);
}

PyObject* Module_set_awaited_by_fallbacks(PyObject*, PyObject* args) {
  PyObject* add;
  PyObject* discard;
  if (!PyArg_ParseTuple(args, "OO:_set_awaited_by_fallbacks", &add, &discard)) {
    return nullptr;
  }
  Py_XSETREF(add_fallback, Py_NewRef(add));
  Py_XSETREF(discard_fallback, Py_NewRef(discard));
  Py_RETURN_NONE;
}

PyMethodDef module_functions[] = {
    {"future_add_to_awaited_by",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(Module_future_add_to_awaited_by)),
     METH_FASTCALL, "Record that `fut` is awaited on by `waiter`."},
    {"future_discard_from_awaited_by",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(Module_future_discard_from_awaited_by)),
     METH_FASTCALL, "Record that `fut` is no longer awaited on by `waiter`."},
    {"_set_awaited_by_fallbacks", Module_set_awaited_by_fallbacks, METH_VARARGS,
     "The add/discard functions used when either argument is not ours."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

void RegisterAwaitingTaskOf(NativeCallback native, AwaitingTaskOf resolve) {
  for (NativeAwaiting& entry : native_awaiting) {
    if (entry.native == nullptr || entry.native == native) {
      entry = NativeAwaiting{native, resolve};
      return;
    }
  }
  Py_FatalError("mt_asyncio: too many native callback kinds for awaited_by");
}

PyObject* FutureAddToAwaitedBy(PyObject* fut, PyObject* waiter) {
  PyObject* pair[] = {fut, waiter};
  return Module_future_add_to_awaited_by(nullptr, pair, 2);
}

PyObject* FutureDiscardFromAwaitedBy(PyObject* fut, PyObject* waiter) {
  PyObject* pair[] = {fut, waiter};
  return Module_future_discard_from_awaited_by(nullptr, pair, 2);
}

PyObject* AwaitedByGet(FutureObject* fut) {
  // Strong references taken under the lock; the set is built after it,
  // since building it hashes (and a subclass's __hash__ is Python code).
  absl::InlinedVector<PyObject*, 4> waiters;
  PyObject* recorded_set = nullptr;
  Py_BEGIN_CRITICAL_SECTION(fut);
  if (fut->awaited_by != nullptr) {
    if (fut->awaited_by_is_set) {
      recorded_set = Py_NewRef(fut->awaited_by);
    } else {
      waiters.push_back(Py_NewRef(fut->awaited_by));
    }
  }
  ForEachCallback(fut, [&](const Callback& cb) {
    if (cb.native == nullptr) return;
    AwaitingTaskOf resolve = ResolverFor(cb.native);
    PyObject* task = resolve != nullptr ? resolve(cb.fn) : nullptr;
    if (task != nullptr) waiters.push_back(Py_NewRef(task));
  });
  Py_END_CRITICAL_SECTION();

  PyObject* result = nullptr;
  if (recorded_set != nullptr || !waiters.empty()) {
    // A new frozenset may be filled with PySet_Add until it is shared.
    result = PyFrozenSet_New(recorded_set);
    for (PyObject* waiter : waiters) {
      if (result != nullptr && PySet_Add(result, waiter) < 0) Py_CLEAR(result);
    }
  } else {
    result = Py_NewRef(Py_None);
  }
  Py_XDECREF(recorded_set);
  for (PyObject* waiter : waiters) Py_DECREF(waiter);
  return result;
}

int RegisterAwaitedBy(PyObject* module) {
  return PyModule_AddFunctions(module, module_functions);
}

}  // namespace mt::pyext
