#include "pyext/src/common/runtime_holder.h"

#include <pthread.h>

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "pyext/src/common/shared_refcount.h"

namespace py = pybind11;

namespace mt::pyext {

thread_local int this_worker_index = -1;

namespace {

// The thread state of the current worker while it is detached (parked).
thread_local PyThreadState* parked_state = nullptr;
// The PyGILState token taken when the worker attached at start.
thread_local PyGILState_STATE attach_token;

std::atomic<RuntimeHolder::BeforeParkFn> before_park_fn{nullptr};
std::atomic<RuntimeHolder::StallSinkFn> stall_sink_fn{nullptr};

#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030E0000
// Free-threaded CPython frees an object whose last reference another
// thread dropped on the thread that made it (biased reference counting:
// the dropper queues it to its owner, pycore_brc.h), when the owner next
// handles its eval breaker — that is, when it next runs Python code. A
// parked worker runs none: a run of one_million at two workers left its
// 100,000 finished tasks, coroutines and contexts (made by the worker that
// ran gather()) queued on that idle worker, alive, until the next run's
// collection had to walk them (a 0.09 s pass instead of 0.02 s, the run
// 2.5x slower). So a worker about to park handles what is pending first.
extern "C" PyAPI_FUNC(int) _Py_HandlePending(PyThreadState* tstate);
// pycore_ceval.h's _PY_EVAL_EXPLICIT_MERGE_BIT (3.14): "objects were
// queued for this thread to merge".
constexpr std::uintptr_t kExplicitMergeBit = 1u << 6;

bool MergeQueuedReferences(std::size_t) {
  PyThreadState* tstate = PyThreadState_GET();
  // Other threads set the bit with atomic ORs.
  if ((__atomic_load_n(&tstate->eval_breaker, __ATOMIC_RELAXED) & kExplicitMergeBit) == 0) {
    return false;
  }
  // What a bytecode boundary would do now (it clears the bit): merge and
  // free the queued objects, and anything else due (a collection, a
  // stop-the-world request, pending calls).
  if (_Py_HandlePending(tstate) != 0) PyErr_WriteUnraisable(nullptr);
  return true;
}
#endif

runtime::scheduler::WorkerHooks InterpreterHooks() {
  runtime::scheduler::WorkerHooks hooks;
  hooks.on_start = [](std::size_t index) {
    this_worker_index = static_cast<int>(index);
    attach_token = PyGILState_Ensure();
  };
  hooks.on_stop = [](std::size_t) {
    PyGILState_Release(attach_token);
    this_worker_index = -1;
  };
  hooks.before_park = [](std::size_t) {
    if (auto fn = before_park_fn.load(std::memory_order_relaxed)) fn();
    parked_state = PyEval_SaveThread();
  };
  hooks.after_unpark = [](std::size_t) {
    PyEval_RestoreThread(parked_state);
    parked_state = nullptr;
  };
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030E0000
  hooks.before_idle = MergeQueuedReferences;
#endif
  return hooks;
}

// A strong reference a C++ closure owns. The closure may be destroyed on a
// thread that is not attached to the interpreter (a unit cancelled while
// the runtime shuts down is dropped by whoever drains the queue), so the
// release attaches first. During interpreter finalization the reference is
// leaked on purpose rather than touching a dying interpreter.
class OwnedRef {
 public:
  explicit OwnedRef(PyObject* obj) : obj_(obj) {}
  OwnedRef(OwnedRef&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  OwnedRef& operator=(OwnedRef&&) = delete;
  ~OwnedRef() {
    if (obj_ == nullptr || !Py_IsInitialized() || Py_IsFinalizing()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(obj_);
    PyGILState_Release(state);
  }
  PyObject* get() const { return obj_; }

 private:
  PyObject* obj_;
};

}  // namespace

void RuntimeHolder::SetStallSink(StallSinkFn fn) {
  stall_sink_fn.store(fn, std::memory_order_relaxed);
}

void RuntimeHolder::SetBeforePark(BeforeParkFn fn) {
  before_park_fn.store(fn, std::memory_order_relaxed);
}

RuntimeHolder& RuntimeHolder::Instance() {
  // Leaked on purpose: workers and the control thread may still read it
  // while the interpreter tears down static state.
  static auto* holder = [] {
    auto* h = new RuntimeHolder();
    pthread_atfork(nullptr, nullptr, [] { Instance().AfterForkInChild(); });
    return h;
  }();
  return *holder;
}

void RuntimeHolder::AfterForkInChild() {
  // Only the forking thread lives on in the child: the runtime's workers,
  // reactor and pools are gone, and a lock one of them held stays held.
  // The parent's runtime is left behind, never shut down (that would wait
  // for threads that do not exist): one reference leaked keeps it (and
  // whatever loops the child still holds) from ever being destroyed. The
  // child's first loop starts a runtime of its own.
  new (&mu_) std::mutex();
  if (runtime_) new std::shared_ptr<runtime::Runtime>(std::move(runtime_));
  runtime_.reset();
  this_worker_index = -1;
}

namespace {

// MT_ASYNCIO_THREADS: the worker count of a runtime started without one
// (the first loop's implicit start, threads=None), for programs whose
// command line the user does not own (uvicorn, hypercorn, gunicorn's
// workers). 0 when unset; a value that is not a count from 1 to 1024 is
// refused with a line on stderr.
std::size_t WorkerThreadsFromEnv() {
  const char* value = std::getenv("MT_ASYNCIO_THREADS");
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long threads = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || threads < 1 || threads > 1024) {
    std::fprintf(stderr,
                 "mt_asyncio: MT_ASYNCIO_THREADS=%s is not a worker count from 1 to 1024; "
                 "the default is used\n",
                 value);
    return 0;
  }
  return static_cast<std::size_t>(threads);
}

}  // namespace

void RuntimeHolder::Start(runtime::Config config) {
  if (config.worker_threads == 0) config.worker_threads = WorkerThreadsFromEnv();
  const std::size_t config_workers = config.worker_threads;
  std::shared_ptr<runtime::Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (runtime_ && runtime_->state() != runtime::admin::RuntimeState::kStopped) {
      throw std::runtime_error("the mt_asyncio runtime is already running");
    }
    rt = std::make_shared<runtime::Runtime>(std::move(config),
                                            InterpreterHooks());
    runtime_ = rt;
  }
  // Stalls are counted and shown in the admin snapshot, and queued for the
  // diagnostics (mt_asyncio.diagnose); a line on stderr for every long
  // step would be noise in CPU-heavy programs (asyncio too only warns
  // about slow callbacks in debug mode).
  // A null sink makes an empty handler: nothing is queued.
  rt->SetStallHandler(stall_sink_fn.load(std::memory_order_relaxed));
  // The hook runs on the runtime's own shutdown, so the pointer is live;
  // the grace is that shutdown's (a control-plane Shutdown picks its own).
  runtime::Runtime* raw = rt.get();
  rt->AddDrainHook([raw] {
    RunDrainCallback(std::chrono::duration<double>(raw->shutdown_grace()).count());
  });
  share_refcounts.store(config_workers > 1, std::memory_order_relaxed);
  absl::Status status = rt->Start();
  if (!status.ok()) {
    // Start stopped whatever it had started: the next start makes a new one.
    std::lock_guard<std::mutex> lock(mu_);
    if (runtime_ == rt) runtime_.reset();
    throw std::runtime_error("cannot start the mt_asyncio runtime: " +
                             std::string(status.message()));
  }
}

void RuntimeHolder::Shutdown() {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return;
  if (rt->IsWorkerThread()) {
    rt->Shutdown();  // Only stops intake; never joins from a worker.
    return;
  }
  // Workers need to attach to finish their units and exit: let them.
  py::gil_scoped_release detached;
  rt->Shutdown();
}

void RuntimeHolder::SpawnCallable(py::object fn) {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt || rt->state() != runtime::admin::RuntimeState::kRunning) {
    throw std::runtime_error("the mt_asyncio runtime is not running");
  }
  absl::Status status = rt->Spawn([callable = OwnedRef(fn.release().ptr())]() mutable {
    // Runs on a worker, which is attached to the interpreter.
    PyObject* result = PyObject_CallNoArgs(callable.get());
    if (result == nullptr) {
      PyErr_WriteUnraisable(callable.get());
    } else {
      Py_DECREF(result);
    }
  });
  if (!status.ok()) {
    // The unit was dropped unrun (its reference released by OwnedRef).
    throw std::runtime_error(std::string(status.message()));
  }
}

std::shared_ptr<runtime::Runtime> RuntimeHolder::EnsureStarted() {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (rt && rt->state() == runtime::admin::RuntimeState::kRunning) return rt;
  try {
    Start(runtime::Config{});
  } catch (const std::runtime_error&) {
    // Lost a race with another starter: use theirs. Anything else (a start
    // that failed) is the caller's error, not a runtime to poll.
    rt = current();
    if (!rt || rt->state() != runtime::admin::RuntimeState::kRunning) throw;
    return rt;
  }
  return current();
}

bool RuntimeHolder::IsWorkerThread() const {
  std::shared_ptr<runtime::Runtime> rt = current();
  return rt && rt->IsWorkerThread();
}

runtime::admin::RuntimeSnapshot RuntimeHolder::Snapshot() const {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return runtime::admin::RuntimeSnapshot{};
  return rt->Snapshot();
}

absl::Status RuntimeHolder::ResizeWorkers(std::size_t workers) {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return absl::FailedPreconditionError("no runtime is running");
  absl::Status status = rt->ResizeWorkers(workers);
  if (status.ok()) share_refcounts.store(workers > 1, std::memory_order_relaxed);
  return status;
}

absl::Status RuntimeHolder::SetBlockingThreadsMax(std::size_t max_threads) {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return absl::FailedPreconditionError("no runtime is running");
  return rt->SetBlockingThreadsMax(max_threads);
}

absl::Status RuntimeHolder::SetBlockingIdleTtl(std::chrono::milliseconds idle_ttl) {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return absl::FailedPreconditionError("no runtime is running");
  return rt->SetBlockingIdleTtl(idle_ttl);
}

absl::Status RuntimeHolder::BeginShutdown(std::chrono::milliseconds grace) {
  std::shared_ptr<runtime::Runtime> rt = current();
  if (!rt) return absl::FailedPreconditionError("no runtime is running");
  return rt->BeginShutdown(grace);
}

namespace {
PyObject* drain_callback = nullptr;  // Strong; guarded by drain_mu.
std::mutex drain_mu;
}  // namespace

void RuntimeHolder::SetDrainCallback(py::object fn) {
  PyObject* old;
  {
    std::lock_guard<std::mutex> lock(drain_mu);
    old = std::exchange(drain_callback, fn.is_none() ? nullptr : fn.release().ptr());
  }
  Py_XDECREF(old);
}

void RuntimeHolder::RunDrainCallback(double grace_seconds) {
  // A shutdown at interpreter exit (atexit) still runs it; one during
  // finalization proper does not touch Python.
  if (!Py_IsInitialized() || Py_IsFinalizing()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  PyObject* fn;
  {
    std::lock_guard<std::mutex> lock(drain_mu);
    fn = Py_XNewRef(drain_callback);
  }
  if (fn != nullptr) {
    PyObject* grace = PyFloat_FromDouble(grace_seconds);
    PyObject* result = grace != nullptr ? PyObject_CallOneArg(fn, grace) : nullptr;
    if (result == nullptr) PyErr_WriteUnraisable(fn);
    Py_XDECREF(result);
    Py_XDECREF(grace);
    Py_DECREF(fn);
  }
  PyGILState_Release(state);
}

std::shared_ptr<runtime::Runtime> RuntimeHolder::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runtime_;
}

}  // namespace mt::pyext
