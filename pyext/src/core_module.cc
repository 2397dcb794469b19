// mt_asyncio._core: the extension module over the C++ runtime.
//
// This file owns the process-wide Runtime (through RuntimeHolder), attaches
// its workers to the interpreter for their whole life (detaching around
// every park), lets Python callables run on the workers, exports the
// runtime's admin interface for the control plane, and registers the
// types that live in files of their own: Loop (loop.cc, with handle.cc,
// loop_tasks.cc, callback_batch.cc, loop_blocking.cc), Future (future.cc), Task (task.cc), gather (gather.cc), the primitives
// (locks.cc, condition.cc, barrier.cc), queues (queues.cc), transports
// (transport.cc, datagram.cc) and fd watchers (fd_watch.cc).

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "pyext/src/admin_service.h"
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
      "_admin_call",
      [](const std::string& method, const std::string& request) {
        std::string body;
        const int code = mt::pyext::AdminCall(method, request, &body);
        return py::make_tuple(code, py::bytes(body));
      },
      py::arg("method"), py::arg("request") = "{}",
      "One call through the admin boundary: (status code, JSON or message).");

  m.def(
      "_set_admin_handler",
      [](py::object fn) {
        if (!fn.is_none() && !PyCallable_Check(fn.ptr())) {
          throw py::type_error("the admin handler must be callable or None");
        }
        mt::pyext::SetAdminHandler(fn.ptr());
      },
      py::arg("fn"), "Install fn(method, request_json) -> str for loop and task methods.");

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

  // The control extension reaches the runtime only through this capsule:
  // a versioned table of C functions (runtime/admin/admin_abi.h).
  m.attr("_admin_abi") = py::capsule(const_cast<MtAdminAbi*>(mt::pyext::AdminAbi()),
                                     kMtAdminAbiCapsuleName);
}
