// The bridge from run_in_executor(None, ...) / to_thread to the runtime's
// blocking pool, whose threads are not Python threads.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "pyext/src/common/py_ref.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop_state.h"
#include "runtime/blocking/pool.h"

namespace mt::pyext {
namespace {

// A blocking-pool thread keeps one Python thread state for its whole life
// and attaches it only around each job: creating and destroying a thread
// state per job (what a bare PyGILState_Ensure/Release pair does on a
// non-Python thread) cost more than a short job itself. Detached between
// jobs, so an idle pool thread never holds up a stop-the-world pause.
struct BlockingThreadState {
  PyThreadState* ts = nullptr;
  PyGILState_STATE gil{};
  ~BlockingThreadState() {
    // Thread exit (the pool retired it). During or after finalization the
    // state is the interpreter's to reclaim.
    if (ts != nullptr && Py_IsInitialized() && !Py_IsFinalizing()) {
      PyEval_RestoreThread(ts);
      PyGILState_Release(gil);
    }
  }
};
thread_local BlockingThreadState blocking_thread_state;

class AttachedForBlockingJob {
 public:
  AttachedForBlockingJob() {
    BlockingThreadState& bts = blocking_thread_state;
    if (bts.ts == nullptr) {
      bts.gil = PyGILState_Ensure();
      bts.ts = PyThreadState_Get();
    } else {
      PyEval_RestoreThread(bts.ts);
    }
  }
  ~AttachedForBlockingJob() { PyEval_SaveThread(); }
  AttachedForBlockingJob(const AttachedForBlockingJob&) = delete;
  AttachedForBlockingJob& operator=(const AttachedForBlockingJob&) = delete;
};

}  // namespace

namespace loop_internal {

// run_in_executor(None, ...): func(*args) on the runtime's blocking pool,
// its outcome delivered to `fut` (one of our thread-safe futures). The
// pool's threads are not Python threads: each job attaches for its run.
PyObject* Loop_run_blocking(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyObject_TypeCheck(args[0], FutureType()) ||
      !PyTuple_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "_run_blocking(future, func, args_tuple)");
    return nullptr;
  }
  PyObject* fut = Py_NewRef(args[0]);
  PyObject* func = Py_NewRef(args[1]);
  PyObject* fargs = Py_NewRef(args[2]);
  // Counts the job in the loop's blocking_jobs while either closure below
  // lives: down once the job is over, after its outcome is in the future,
  // so a waiter that sees zero also sees every outcome delivered.
  class JobOver {
   public:
    explicit JobOver(std::shared_ptr<std::atomic<std::int64_t>> jobs)
        : jobs_(std::move(jobs)) {
      jobs_->fetch_add(1, std::memory_order_relaxed);
    }
    ~JobOver() { jobs_->fetch_sub(1, std::memory_order_release); }
    JobOver(const JobOver&) = delete;
    JobOver& operator=(const JobOver&) = delete;

   private:
    std::shared_ptr<std::atomic<std::int64_t>> jobs_;
  };
  auto over = std::make_shared<JobOver>(StateOf(self)->blocking_jobs);
  auto release = [](PyObject* a, PyObject* b, PyObject* c) {
    DecRefAnyThread(a);
    DecRefAnyThread(b);
    DecRefAnyThread(c);
  };
  absl::StatusOr<runtime::blocking::BlockingPool::Handle> handle =
      StateOf(self)->runtime->blocking_pool().Spawn(
          [fut, func, fargs, over]() {
            if (!Py_IsInitialized() || Py_IsFinalizing()) return;
            AttachedForBlockingJob attached;
            auto* f = reinterpret_cast<FutureObject*>(fut);
            if (!FutureIsDone(f)) {  // Cancelled before it started: skip.
              PyObject* res = PyObject_Call(func, fargs, nullptr);
              if (res != nullptr) {
                if (FutureSetResult(f, res) < 0) PyErr_Clear();  // Lost a race.
                Py_DECREF(res);
              } else {
                PyObject* exc = PyErr_GetRaisedException();
                if (FutureSetException(f, exc) < 0) PyErr_Clear();
                Py_DECREF(exc);
              }
            }
            Py_DECREF(fargs);
            Py_DECREF(func);
            Py_DECREF(fut);
          },
          [fut, func, fargs, release, over]() {
            // Never started (the runtime shut down): the awaiting task must
            // not wait forever.
            if (Py_IsInitialized() && !Py_IsFinalizing()) {
              PyGILState_STATE gil = PyGILState_Ensure();
              if (FutureCancel(reinterpret_cast<FutureObject*>(fut), Py_None) < 0) {
                PyErr_Clear();
              }
              PyGILState_Release(gil);
            }
            release(fargs, func, fut);
          });
  over.reset();
  if (!handle.ok()) {
    Py_DECREF(fargs);
    Py_DECREF(func);
    Py_DECREF(fut);
    PyErr_SetString(PyExc_RuntimeError, std::string(handle.status().message()).c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Loop_blocking_jobs(PyObject* self, PyObject*) {
  return PyLong_FromLongLong(StateOf(self)->blocking_jobs->load(std::memory_order_acquire));
}

}  // namespace loop_internal
}  // namespace mt::pyext
