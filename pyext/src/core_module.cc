// mt_asyncio._core: the extension module over the C++ runtime.
//
// This first slice owns the process-wide Runtime, attaches its workers to
// the interpreter for their whole life (detaching around every park), lets
// Python callables run on the workers, and exports the runtime's admin
// interface in a capsule for the control plane. The asyncio loop, Task and
// Future types are built on this in later work.

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "pyext/src/awaited_by.h"
#include "pyext/src/barrier.h"
#include "pyext/src/condition.h"
#include "pyext/src/datagram.h"
#include "pyext/src/fd_watch.h"
#include "pyext/src/future.h"
#include "pyext/src/gather.h"
#include "pyext/src/locks.h"
#include "pyext/src/loop.h"
#include "pyext/src/queues.h"
#include "pyext/src/serial_tasks.h"
#include "pyext/src/task.h"
#include "pyext/src/transport.h"
#include "pyext/src/runtime_holder.h"
#include "runtime/admin/admin_api.h"

namespace py = pybind11;

namespace mt::pyext {
namespace {

py::dict BuildInfo() {
  py::dict info;
#if defined(NDEBUG) && defined(__OPTIMIZE__)
  info["optimized"] = true;
#else
  info["optimized"] = false;
#endif
#if defined(__SANITIZE_ADDRESS__)
  info["sanitizer"] = "address";
#elif defined(__SANITIZE_THREAD__)
  info["sanitizer"] = "thread";
#else
  info["sanitizer"] = py::none();
#endif
#ifdef Py_GIL_DISABLED
  info["free_threaded_build"] = true;
#else
  info["free_threaded_build"] = false;
#endif
  info["python_headers"] = PY_VERSION;
  return info;
}

py::dict SnapshotToDict(const runtime::admin::RuntimeSnapshot& snap) {
  py::dict d;
  d["state"] = std::string(runtime::admin::RuntimeStateName(snap.state));
  d["worker_threads"] = snap.worker_threads;
  d["live_workers"] = snap.live_workers;
  d["injector_depth"] = snap.injector_depth;
  d["searching_workers"] = snap.searching_workers;
  d["parked_workers"] = snap.parked_workers;
  d["tasks_in_flight"] = snap.tasks_in_flight;
  d["timers_pending"] = snap.timers_pending;
  d["fds_registered"] = snap.fds_registered;
  d["stalls_detected"] = snap.stalls_detected;
  d["reactor"] = std::string(runtime::ReactorModeName(snap.config.reactor));
  d["uptime_seconds"] = snap.uptime_seconds;
  py::dict blocking;
  blocking["threads"] = snap.blocking.threads;
  blocking["idle"] = snap.blocking.idle;
  blocking["running"] = snap.blocking.running;
  blocking["queued"] = snap.blocking.queued;
  blocking["max_threads"] = snap.blocking.max_threads;
  blocking["completed"] = snap.blocking.completed;
  blocking["cancelled"] = snap.blocking.cancelled;
  d["blocking"] = std::move(blocking);
  d["blocking_threadpool_size"] = snap.config.blocking_threads_max;
  d["blocking_threadpool_idle_ttl"] =
      std::chrono::duration<double>(snap.config.blocking_idle_ttl).count();
  py::list workers;
  for (const auto& w : snap.workers) {
    py::dict wd;
    wd["index"] = w.index;
    wd["units_run"] = w.units_run;
    wd["parks"] = w.parks;
    wd["busy_ns"] = w.busy_ns;
    wd["active"] = w.active;
    wd["steals"] = w.steals;
    wd["stolen_units"] = w.stolen_units;
    wd["stolen_from"] = w.stolen_from;
    wd["reactor_polls"] = w.reactor_polls;
    wd["overflows"] = w.overflows;
    wd["local_queue_depth"] = w.local_queue_depth;
    wd["lifo_occupied"] = w.lifo_occupied;
    wd["current_task_id"] = w.current_task_id;
    wd["current_task_running_ns"] = w.current_task_running_ns;
    wd["stalled"] = w.stalled;
    workers.append(std::move(wd));
  }
  d["workers"] = std::move(workers);
  return d;
}

// An admin call's failure as the exception a Python caller expects: bad
// arguments are ValueError, anything else (not running, ...) RuntimeError.
void ThrowIfError(const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) throw py::value_error(std::string(status.message()));
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

}  // namespace
}  // namespace mt::pyext

PYBIND11_MODULE(_core, m, py::mod_gil_not_used()) {
  using mt::pyext::RuntimeHolder;
  using mt::pyext::ThrowIfError;
  m.doc() = "mt_asyncio's native core: the C++ runtime and its Python glue.";

  m.def("build_info", &mt::pyext::BuildInfo,
        "How this extension was compiled (optimized, sanitizer, ABI).");

  m.def(
      "start_runtime",
      [](std::size_t threads, std::size_t blocking_threadpool_size,
         double blocking_threadpool_idle_ttl) {
        if (blocking_threadpool_size == 0) {
          throw py::value_error("blocking_threadpool_size must be >= 1");
        }
        if (!(blocking_threadpool_idle_ttl >= 0)) {
          throw py::value_error("blocking_threadpool_idle_ttl must be >= 0");
        }
        mt::runtime::Config config;
        config.worker_threads = threads;
        config.blocking_threads_max = blocking_threadpool_size;
        config.blocking_idle_ttl = std::chrono::milliseconds(
            static_cast<long long>(blocking_threadpool_idle_ttl * 1000));
        RuntimeHolder::Instance().Start(std::move(config));
      },
      py::arg("threads") = 0, py::arg("blocking_threadpool_size") = 128,
      py::arg("blocking_threadpool_idle_ttl") = 30.0,
      "Start the process-wide runtime. threads=0 means cpu_count() + 4.");

  m.def(
      "shutdown_runtime", [] { RuntimeHolder::Instance().Shutdown(); },
      "Run what is queued, stop and join the workers. Idempotent.");

  m.def(
      "spawn",
      [](py::object fn) {
        if (!PyCallable_Check(fn.ptr())) {
          throw py::type_error("spawn() argument must be callable");
        }
        RuntimeHolder::Instance().SpawnCallable(std::move(fn));
      },
      py::arg("fn"),
      "Call fn() on a runtime worker. Exceptions go to sys.unraisablehook.");

  m.def(
      "runtime_snapshot",
      [] {
        return mt::pyext::SnapshotToDict(RuntimeHolder::Instance().Snapshot());
      },
      "State, configuration and per-worker counters of the runtime.");

  m.def(
      "resize_workers",
      [](std::size_t workers) {
        ThrowIfError(RuntimeHolder::Instance().ResizeWorkers(workers));
      },
      py::arg("workers"),
      "Resize the running runtime's worker pool live.");

  m.def(
      "set_blocking_threads_max",
      [](std::size_t max_threads) {
        ThrowIfError(RuntimeHolder::Instance().SetBlockingThreadsMax(max_threads));
      },
      py::arg("max_threads"),
      "Change the running runtime's blocking-pool limit live.");

  m.def(
      "request_shutdown",
      [] {
        std::shared_ptr<mt::runtime::Runtime> rt = RuntimeHolder::Instance().current();
        if (rt) rt->RequestShutdown();
      },
      "Begin a coordinated shutdown of the runtime without waiting for it "
      "(the supervisor thread runs it with the configured grace).");

  m.def(
      "_set_drain_hook",
      [](py::object fn) {
        if (!fn.is_none() && !PyCallable_Check(fn.ptr())) {
          throw py::type_error("the drain hook must be callable or None");
        }
        RuntimeHolder::Instance().SetDrainCallback(std::move(fn));
      },
      py::arg("fn"),
      "Set fn(grace_seconds), run when a coordinated shutdown begins.");

  m.def(
      "on_worker_thread",
      [] { return RuntimeHolder::Instance().IsWorkerThread(); },
      "True when called on one of the runtime's worker threads.");

  if (mt::pyext::RegisterFutureType(m.ptr()) < 0 ||
      mt::pyext::RegisterLoopTypes(m.ptr()) < 0 ||
      mt::pyext::RegisterTaskType(m.ptr()) < 0 ||
      mt::pyext::RegisterGather(m.ptr()) < 0 ||
      mt::pyext::RegisterLockTypes(m.ptr()) < 0 ||
      mt::pyext::RegisterQueueType(m.ptr()) < 0 ||
      mt::pyext::RegisterConditionType(m.ptr()) < 0 ||
      mt::pyext::RegisterBarrierType(m.ptr()) < 0 ||
      mt::pyext::RegisterAwaitedBy(m.ptr()) < 0 ||
      mt::pyext::RegisterFdWatch(m.ptr()) < 0 ||
      mt::pyext::RegisterTransportTypes(m.ptr()) < 0 ||
      mt::pyext::RegisterDatagramType(m.ptr()) < 0 ||
      mt::pyext::RegisterSerialTasks(m.ptr()) < 0) {
    throw py::error_already_set();
  }

  // The control extension reaches the runtime only through this capsule.
  m.attr("_admin_api") = py::capsule(
      static_cast<mt::runtime::admin::AdminApi*>(&RuntimeHolder::Instance()),
      mt::runtime::admin::kAdminApiCapsuleName);
}
