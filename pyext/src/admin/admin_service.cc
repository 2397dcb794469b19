#include "pyext/src/admin/admin_service.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pyext/src/common/runtime_holder.h"
#include "runtime/admin/json.h"
#include "runtime/admin/snapshot_json.h"

namespace mt::pyext {
namespace {

namespace admin = runtime::admin;

struct Answer {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string body;
};

Answer Fail(const absl::Status& status) {
  return {status.code(), std::string(status.message())};
}

Answer Ok(std::string body) { return {absl::StatusCode::kOk, std::move(body)}; }

// A whole number in [lo, hi] from a request field (absent: `absent`).
absl::StatusOr<std::uint64_t> CountField(const admin::FlatJson& req, std::string_view key,
                                         double absent, double lo, double hi) {
  absl::StatusOr<double> v = admin::NumberField(req, key, absent);
  if (!v.ok()) return v.status();
  if (!(*v >= lo && *v <= hi) || std::floor(*v) != *v) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(key), " must be a whole number in [", lo, ", ", hi, "], got ", *v));
  }
  return static_cast<std::uint64_t>(*v);
}

// Seconds in [0, hi] from a request field.
absl::StatusOr<double> SecondsField(const admin::FlatJson& req, std::string_view key,
                                    double hi) {
  absl::StatusOr<double> v = admin::NumberField(req, key, 0);
  if (!v.ok()) return v.status();
  if (!(*v >= 0 && *v <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(key), " must be in [0, ", hi, "] seconds, got ", *v));
  }
  return *v;
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
}

Answer GetRuntime() {
  return Ok(admin::RuntimeSnapshotToJson(RuntimeHolder::Instance().Snapshot()));
}

Answer ListWorkers() {
  const admin::RuntimeSnapshot snap = RuntimeHolder::Instance().Snapshot();
  admin::JsonWriter json;
  json.BeginObject().Key("workers").BeginArray();
  for (const admin::WorkerSnapshot& w : snap.workers) admin::WriteWorker(json, w);
  json.EndArray()
      .Field("injector_depth", snap.injector_depth)
      .Field("target_workers", snap.worker_threads)
      .Field("live_workers", snap.live_workers)
      .Key("blocking");
  admin::WriteBlockingPool(json, snap.blocking);
  json.EndObject();
  return Ok(json.Take());
}

// The snapshot a change starts from; changes need a running runtime.
absl::StatusOr<admin::RuntimeSnapshot> RunningSnapshot() {
  admin::RuntimeSnapshot snap = RuntimeHolder::Instance().Snapshot();
  if (snap.state != admin::RuntimeState::kRunning) {
    return absl::FailedPreconditionError("the runtime is not running");
  }
  return snap;
}

Answer ResizeWorkers(const admin::FlatJson& req) {
  RuntimeHolder& holder = RuntimeHolder::Instance();
  absl::StatusOr<admin::RuntimeSnapshot> running = RunningSnapshot();
  if (!running.ok()) return Fail(running.status());
  const admin::RuntimeSnapshot& before = *running;
  absl::StatusOr<std::uint64_t> target =
      CountField(req, "target", 0, 1, static_cast<double>(before.max_workers));
  if (!target.ok()) return Fail(target.status());
  if (absl::Status s = holder.ResizeWorkers(*target); !s.ok()) return Fail(s);
  const admin::RuntimeSnapshot after = holder.Snapshot();
  admin::JsonWriter json;
  json.BeginObject()
      .Field("previous", before.worker_threads)
      .Field("target", after.worker_threads)
      .Field("live_workers", after.live_workers)
      .Field("converged", after.live_workers == after.worker_threads)
      .Field("max_workers", after.max_workers)
      .EndObject();
  return Ok(json.Take());
}

// Longest idle TTL accepted: a day (longer is "never" in practice, and
// keeps the millisecond count far from overflow).
constexpr double kMaxIdleTtlSeconds = 86'400;
constexpr double kMaxBlockingThreads = 100'000;

Answer SetBlockingPool(const admin::FlatJson& req) {
  RuntimeHolder& holder = RuntimeHolder::Instance();
  absl::StatusOr<admin::RuntimeSnapshot> running = RunningSnapshot();
  if (!running.ok()) return Fail(running.status());
  const admin::RuntimeSnapshot& before = *running;
  absl::StatusOr<std::uint64_t> max_threads =
      CountField(req, "max_threads", 0, 0, kMaxBlockingThreads);
  if (!max_threads.ok()) return Fail(max_threads.status());
  absl::StatusOr<double> ttl = SecondsField(req, "idle_ttl_seconds", kMaxIdleTtlSeconds);
  if (!ttl.ok()) return Fail(ttl.status());
  if (*ttl > 0 && Millis(*ttl).count() == 0) {
    return Fail(absl::InvalidArgumentError("idle_ttl_seconds must be at least 0.001"));
  }
  // Both checked before either changes.
  if (*max_threads > 0) {
    if (absl::Status s = holder.SetBlockingThreadsMax(*max_threads); !s.ok()) return Fail(s);
  }
  if (*ttl > 0) {
    if (absl::Status s = holder.SetBlockingIdleTtl(Millis(*ttl)); !s.ok()) return Fail(s);
  }
  const admin::RuntimeSnapshot after = holder.Snapshot();
  const auto seconds = [](std::chrono::milliseconds d) {
    return std::chrono::duration<double>(d).count();
  };
  admin::JsonWriter json;
  json.BeginObject()
      .Field("previous_max_threads", before.blocking.max_threads)
      .Field("max_threads", after.blocking.max_threads)
      .Field("previous_idle_ttl_seconds", seconds(before.blocking.idle_ttl))
      .Field("idle_ttl_seconds", seconds(after.blocking.idle_ttl))
      .EndObject();
  return Ok(json.Take());
}

constexpr double kMaxGraceSeconds = 3600;

Answer Shutdown(const admin::FlatJson& req) {
  RuntimeHolder& holder = RuntimeHolder::Instance();
  absl::StatusOr<double> grace = SecondsField(req, "grace_seconds", kMaxGraceSeconds);
  if (!grace.ok()) return Fail(grace.status());
  bool quick = false;
  if (auto it = req.find("mode"); it != req.end()) {
    const std::string* mode = std::get_if<std::string>(&it->second);
    if (mode == nullptr || (*mode != "SHUTDOWN_MODE_UNSPECIFIED" &&
                            *mode != "SHUTDOWN_MODE_GRACEFUL" && *mode != "SHUTDOWN_MODE_QUICK")) {
      return Fail(absl::InvalidArgumentError(
          "mode must be SHUTDOWN_MODE_GRACEFUL or SHUTDOWN_MODE_QUICK"));
    }
    quick = *mode == "SHUTDOWN_MODE_QUICK";
  }
  const admin::RuntimeSnapshot snap = holder.Snapshot();
  bool joined = false;
  if (snap.state == admin::RuntimeState::kCreated) {
    return Fail(absl::FailedPreconditionError("no runtime was started in this process"));
  }
  if (snap.state == admin::RuntimeState::kRunning) {
    const std::chrono::milliseconds grace_ms =
        quick ? std::chrono::milliseconds(0)
              : (*grace > 0 ? Millis(*grace)
                            : std::chrono::duration_cast<std::chrono::milliseconds>(
                                  snap.config.shutdown_grace));
    // Lost a race with another shutdown: follow that one.
    joined = !holder.BeginShutdown(grace_ms).ok();
  } else {
    joined = true;  // Already under way (or over): follow it.
  }
  admin::JsonWriter json;
  json.BeginObject().Field("joined", joined).EndObject();
  return Ok(json.Take());
}

// --- the Python handler ----------------------------------------------------

std::mutex handler_mu;
PyObject* handler = nullptr;  // Strong; guarded by handler_mu.

absl::StatusCode CodeForPythonError(PyObject* exc) {
  if (PyErr_GivenExceptionMatches(exc, PyExc_ValueError) ||
      PyErr_GivenExceptionMatches(exc, PyExc_TypeError)) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_LookupError)) return absl::StatusCode::kNotFound;
  if (PyErr_GivenExceptionMatches(exc, PyExc_NotImplementedError)) {
    return absl::StatusCode::kUnimplemented;
  }
  return absl::StatusCode::kInternal;
}

// A control-plane thread's thread state: made at its first call into
// Python and kept for the thread's life (making and deleting one per call,
// as PyGILState_Ensure does on a foreign thread, cost a step-heavy
// workload several percent with a Watch at 10 Hz), then deleted when the
// thread exits. gRPC's sync server starts and retires threads as calls
// come and go; a state left behind by each one kept its memory (on a
// free-threaded build its own allocator heaps), and RSS grew by megabytes
// with every thread gRPC ever started.
struct ControlThreadState {
  PyThreadState* ts = nullptr;
  ~ControlThreadState() {
    // The control plane is closed, and its threads joined, before the
    // interpreter finalizes; during or after finalization the state is
    // the interpreter's to reclaim.
    if (ts == nullptr || !Py_IsInitialized() || Py_IsFinalizing()) return;
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
    ts = nullptr;
  }
};
thread_local ControlThreadState control_thread_state;

Answer CallPython(std::string_view method, std::string_view request) {
  if (!Py_IsInitialized() || Py_IsFinalizing()) {
    return Fail(absl::UnavailableError("the interpreter is shutting down"));
  }
  // A control-plane thread attaches with a thread state of its own (see
  // ControlThreadState). A thread that is already attached (a Python
  // caller of _admin_call) keeps its own.
  const bool attached = PyGILState_Check();
  if (!attached) {
    PyThreadState*& ts = control_thread_state.ts;
    if (ts == nullptr) ts = PyThreadState_New(PyInterpreterState_Main());
    PyEval_RestoreThread(ts);
  }
  PyObject* fn;
  {
    std::lock_guard<std::mutex> lock(handler_mu);
    fn = Py_XNewRef(handler);
  }
  Answer answer;
  if (fn == nullptr) {
    answer = Fail(absl::UnimplementedError(absl::StrCat(
        "unknown method ", std::string(method), " (loop and task methods need mt_asyncio._admin)")));
  } else {
    PyObject* result =
        PyObject_CallFunction(fn, "s#s#", method.data(), static_cast<Py_ssize_t>(method.size()),
                              request.data(), static_cast<Py_ssize_t>(request.size()));
    Py_DECREF(fn);
    if (result != nullptr && PyUnicode_Check(result)) {
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(result, &size);
      if (utf8 != nullptr) answer = Ok(std::string(utf8, static_cast<std::size_t>(size)));
    } else if (result != nullptr) {
      PyErr_SetString(PyExc_TypeError, "the admin handler must return a str");
    }
    Py_XDECREF(result);
    if (PyErr_Occurred()) {
      PyObject* exc = PyErr_GetRaisedException();
      answer.code = CodeForPythonError(exc);
      PyObject* text = PyObject_Str(exc);
      const char* msg = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
      answer.body = msg != nullptr ? msg : "error in the admin handler";
      if (answer.code == absl::StatusCode::kInternal) {
        // A bug on our side: keep its traceback for whoever runs the process.
        PyErr_SetRaisedException(Py_NewRef(exc));
        PyErr_WriteUnraisable(nullptr);
      }
      Py_XDECREF(text);
      Py_DECREF(exc);
      PyErr_Clear();
    }
  }
  if (!attached) PyEval_SaveThread();
  return answer;
}

Answer Dispatch(std::string_view method, std::string_view request) {
  // The runtime's own methods: no interpreter needed.
  const bool native = method == "GetRuntime" || method == "ListWorkers" ||
                      method == "ResizeWorkers" || method == "SetBlockingPool" ||
                      method == "Shutdown";
  if (!native) return CallPython(method, request);
  absl::StatusOr<admin::FlatJson> req =
      admin::ParseFlatJson(request.empty() ? std::string_view("{}") : request);
  if (!req.ok()) return Fail(req.status());
  if (method == "GetRuntime") return GetRuntime();
  if (method == "ListWorkers") return ListWorkers();
  if (method == "ResizeWorkers") return ResizeWorkers(*req);
  if (method == "SetBlockingPool") return SetBlockingPool(*req);
  return Shutdown(*req);
}

MtAdminResponse AbiCall(const char* method, size_t method_size, const char* request,
                        size_t request_size) {
  Answer answer;
  try {
    answer = Dispatch(std::string_view(method, method_size),
                      std::string_view(request, request_size));
  } catch (const std::exception& e) {
    answer = Fail(absl::InternalError(e.what()));
  }
  MtAdminResponse out{};
  out.code = static_cast<int32_t>(answer.code);
  out.body_size = answer.body.size();
  out.body = static_cast<char*>(std::malloc(answer.body.size() + 1));
  if (out.body == nullptr) {
    out.code = static_cast<int32_t>(absl::StatusCode::kResourceExhausted);
    out.body_size = 0;
    return out;
  }
  std::memcpy(out.body, answer.body.data(), answer.body.size());
  out.body[answer.body.size()] = '\0';
  return out;
}

void AbiFree(MtAdminResponse* response) {
  if (response == nullptr) return;
  std::free(response->body);
  response->body = nullptr;
  response->body_size = 0;
}

const MtAdminAbi kAbi = {
    .abi_version = kMtAdminAbiVersion,
    .struct_size = sizeof(MtAdminAbi),
    .call = AbiCall,
    .free_response = AbiFree,
};

}  // namespace

const MtAdminAbi* AdminAbi() { return &kAbi; }

void SetAdminHandler(PyObject* fn) {
  PyObject* old;
  {
    std::lock_guard<std::mutex> lock(handler_mu);
    old = std::exchange(handler, fn == Py_None ? nullptr : Py_NewRef(fn));
  }
  Py_XDECREF(old);
}

int AdminCall(const std::string& method, const std::string& request, std::string* body) {
  // Not through CallPython's PyGILState_Ensure when answered natively; a
  // Python method re-enters the handler on this (already attached) thread.
  MtAdminResponse r = AbiCall(method.data(), method.size(), request.data(), request.size());
  body->assign(r.body != nullptr ? r.body : "", r.body_size);
  const int code = r.code;
  AbiFree(&r);
  return code;
}

}  // namespace mt::pyext
