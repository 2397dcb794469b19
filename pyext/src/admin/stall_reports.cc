#include "pyext/src/admin/stall_reports.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "pyext/src/common/runtime_holder.h"

namespace mt::pyext {
namespace {

// Reports nobody has taken yet. A program with steps that all run long
// would report one per step and worker; the Python side captures a few
// stacks a second at most, so the rest are only counted.
constexpr std::size_t kMaxQueued = 64;

struct Queue {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<runtime::admin::StallReport> reports;
  std::uint64_t dropped = 0;
};

// Never destroyed: the supervisor may push while the process exits.
Queue& Reports() {
  static Queue* queue = new Queue();
  return *queue;
}

// _stall_wait(timeout) -> (worker index, task id, running ns, units_run,
// thread ident, native thread id, dropped so far) or None when none came within
// timeout seconds. Waits detached from the interpreter.
PyObject* Module_stall_wait(PyObject*, PyObject* arg) {
  const double timeout = PyFloat_AsDouble(arg);
  if (timeout == -1.0 && PyErr_Occurred()) return nullptr;
  if (!(timeout >= 0)) {
    PyErr_SetString(PyExc_ValueError,
                    "timeout must be a number of seconds >= 0");
    return nullptr;
  }
  Queue& q = Reports();
  bool got = false;
  runtime::admin::StallReport report;
  std::uint64_t dropped = 0;
  Py_BEGIN_ALLOW_THREADS;
  {
    std::unique_lock<std::mutex> lock(q.mu);
    const auto wait = std::chrono::duration<double>(std::min(timeout, 3600.0));
    if (q.ready.wait_for(lock, wait, [&] { return !q.reports.empty(); })) {
      report = q.reports.front();
      q.reports.pop_front();
      got = true;
    }
    dropped = q.dropped;
  }
  Py_END_ALLOW_THREADS;
  if (!got) Py_RETURN_NONE;
  return Py_BuildValue("(nKKKKiK)",
                       static_cast<Py_ssize_t>(report.worker_index),
                       static_cast<unsigned long long>(report.task_id),
                       static_cast<unsigned long long>(report.running_ns),
                       static_cast<unsigned long long>(report.units_run),
                       static_cast<unsigned long long>(report.thread_ident),
                       static_cast<int>(report.os_thread_id),
                       static_cast<unsigned long long>(dropped));
}

// _worker_units_run(index) -> int: how many units the worker has finished
// (None when no runtime runs or there is no such worker). A stall goes on
// while this still equals its report's units_run.
PyObject* Module_worker_units_run(PyObject*, PyObject* arg) {
  const Py_ssize_t index = PyLong_AsSsize_t(arg);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  std::shared_ptr<runtime::Runtime> rt = RuntimeHolder::Instance().current();
  if (!rt || index < 0) Py_RETURN_NONE;
  const runtime::metrics::WorkerMetrics* m =
      rt->scheduler().WorkerMetrics(static_cast<std::size_t>(index));
  if (m == nullptr) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(
      m->units_run.load(std::memory_order_acquire));
}

PyMethodDef functions[] = {
    {"_stall_wait", Module_stall_wait, METH_O,
     "_stall_wait(timeout) -> (worker, task id, running ns, units_run, thread "
     "ident, "
     "native thread id, dropped) or None: the next long step the stall "
     "detector saw."},
    {"_worker_units_run", Module_worker_units_run, METH_O,
     "_worker_units_run(index) -> units the worker finished, or None."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

void PushStallReport(const runtime::admin::StallReport& report) {
  Queue& q = Reports();
  {
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.reports.size() >= kMaxQueued) {
      ++q.dropped;
      return;
    }
    q.reports.push_back(report);
  }
  q.ready.notify_one();
}

int RegisterStallReports(PyObject* module) {
  return PyModule_AddFunctions(module, functions);
}

}  // namespace mt::pyext
