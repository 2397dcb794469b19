// mt_asyncio._core: the extension module over the C++ runtime.
//
// This file owns the process-wide Runtime (through RuntimeHolder), attaches
// its workers to the interpreter for their whole life (detaching around
// every park) and lets Python callables run on the workers. Each package
// of pyext/src adds its own types and functions through one entry,
// Register<Package>Package, in the order of the package map in
// docs/architecture.md.

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "pyext/src/admin/register.h"
#include "pyext/src/common/runtime_holder.h"
#include "pyext/src/future/register.h"
#include "pyext/src/loop/register.h"
#include "pyext/src/net/register.h"
#include "pyext/src/sync/register.h"
#include "runtime/metrics/cpu_round_trip.h"

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

}  // namespace
}  // namespace mt::pyext

PYBIND11_MODULE(_core, m, py::mod_gil_not_used()) {
  using mt::pyext::RuntimeHolder;
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

  m.def(
      "_cpu_round_trip_ns",
      [](int cpu_a, int cpu_b, int rounds, int samples,
         double budget_seconds) -> py::object {
        if (rounds <= 0 || samples <= 0) {
          throw py::value_error("rounds and samples must be >= 1");
        }
        if (!(budget_seconds > 0)) {
          throw py::value_error("budget_seconds must be > 0");
        }
        std::optional<double> ns;
        {
          py::gil_scoped_release detached;
          ns = mt::runtime::metrics::CacheLineRoundTripNs(
              cpu_a, cpu_b, rounds, samples,
              std::chrono::milliseconds(
                  static_cast<long long>(budget_seconds * 1000)));
        }
        if (!ns) return py::none();
        return py::float_(*ns);
      },
      py::arg("cpu_a"), py::arg("cpu_b"), py::arg("rounds") = 20000,
      py::arg("samples") = 5, py::arg("budget_seconds") = 2.0,
      "Nanoseconds a cache line takes from cpu_a to cpu_b and back (the "
      "median of `samples` timings of `rounds` hand-offs between two pinned "
      "threads); None when the CPUs cannot be used or the budget runs out.");

  // One entry per package, lowest first (docs/architecture.md has the map).
  if (mt::pyext::RegisterFuturePackage(m.ptr()) < 0 ||
      mt::pyext::RegisterSyncPackage(m.ptr()) < 0 ||
      mt::pyext::RegisterLoopPackage(m.ptr()) < 0 ||
      mt::pyext::RegisterNetPackage(m.ptr()) < 0 ||
      mt::pyext::RegisterAdminPackage(m.ptr()) < 0) {
    throw py::error_already_set();
  }
}
