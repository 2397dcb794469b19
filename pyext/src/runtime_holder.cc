#include "pyext/src/runtime_holder.h"

#include <Python.h>

#include <string>
#include <utility>

namespace py = pybind11;

namespace mt::pyext {
namespace {

// The thread state of the current worker while it is detached (parked).
thread_local PyThreadState* parked_state = nullptr;
// The PyGILState token taken when the worker attached at start.
thread_local PyGILState_STATE attach_token;

runtime::scheduler::WorkerHooks InterpreterHooks() {
  runtime::scheduler::WorkerHooks hooks;
  hooks.on_start = [](std::size_t) { attach_token = PyGILState_Ensure(); };
  hooks.on_stop = [](std::size_t) { PyGILState_Release(attach_token); };
  hooks.before_park = [](std::size_t) { parked_state = PyEval_SaveThread(); };
  hooks.after_unpark = [](std::size_t) {
    PyEval_RestoreThread(parked_state);
    parked_state = nullptr;
  };
  return hooks;
}

}  // namespace

RuntimeHolder& RuntimeHolder::Instance() {
  // Leaked on purpose: workers and the control thread may still read it
  // while the interpreter tears down static state.
  static auto* holder = new RuntimeHolder();
  return *holder;
}

void RuntimeHolder::Start(runtime::Config config) {
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
  absl::Status status = rt->Start();
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
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
  PyObject* callable = fn.release().ptr();
  absl::Status status = rt->Spawn([callable] {
    // Runs on a worker, which is attached to the interpreter.
    PyObject* result = PyObject_CallNoArgs(callable);
    if (result == nullptr) {
      PyErr_WriteUnraisable(callable);
    } else {
      Py_DECREF(result);
    }
    Py_DECREF(callable);
  });
  if (!status.ok()) {
    // The unit (and with it our reference) was not queued; this thread is
    // attached, so dropping the reference here is safe.
    Py_DECREF(callable);
    throw std::runtime_error(std::string(status.message()));
  }
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

std::shared_ptr<runtime::Runtime> RuntimeHolder::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runtime_;
}

}  // namespace mt::pyext
