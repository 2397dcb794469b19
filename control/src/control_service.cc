#include "control/src/control_service.h"

#include <google/protobuf/util/json_util.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>

namespace mt::control {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMaxWaitSeconds = 600;
// Diagnose watches the tasks at most this long (one inspection turn).
constexpr double kMaxSpinWindowSeconds = 5;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// Sleeps up to `d`, returning early (false) when the client goes away.
// The sync API has no cancellation callback, so it looks every 100 ms: a
// Watch at 10 Hz wakes once per tick, and a gone client's place is freed
// within 100 ms.
bool SleepUnlessCancelled(grpc::ServerContext* context, Clock::duration d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
    if (context->IsCancelled()) return false;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(100)));
  }
  return !context->IsCancelled();
}

}  // namespace

ControlService::ControlService(AdminClient admin, v1::InterpreterInfo interpreter,
                               ServiceHooks hooks, ServiceLimits limits)
    : admin_(admin),
      interpreter_(std::move(interpreter)),
      hooks_(std::move(hooks)),
      refusals_(hooks_.refusals != nullptr ? hooks_.refusals
                                           : std::make_shared<RefusalLog>(hooks_.audit)),
      limits_(limits) {}

void ControlService::Audit(const grpc::ServerContext& context, const std::string& what) const {
  const std::string who = hooks_.identify ? hooks_.identify(context) : context.peer();
  const std::string line = "mt_asyncio control: " + who + ": " + what;
  if (hooks_.audit) {
    hooks_.audit(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void ControlService::Refuse(const grpc::ServerContext& context, RefusalKind kind,
                            const char* method, const char* code, const std::string& why) const {
  const std::string who = hooks_.identify ? hooks_.identify(context) : context.peer();
  const std::optional<TlsPeer> peer =
      hooks_.tls_peer ? hooks_.tls_peer(context) : std::optional<TlsPeer>();
  refusals_->Record(kind, PeerAddress(peer ? peer->address : context.peer()),
                    peer ? peer->subject : std::string(), why,
                    who + ": " + method + " -> " + code + " (" + why + ")");
}

grpc::Status ControlService::Authorize(const grpc::ServerContext& context, bool mutating,
                                       const char* method, Role* role_out) {
  const char* no_role = nullptr;
  const Role role = hooks_.role ? hooks_.role(context, &no_role) : Role::kAdmin;
  if (role_out != nullptr) *role_out = role;
  if (role == Role::kAdmin || (role == Role::kReadOnly && !mutating)) {
    grpc::Status admitted =
        hooks_.limiter != nullptr ? hooks_.limiter->Admit(context, role) : grpc::Status::OK;
    if (admitted.ok()) CountCall(method);
    return admitted;
  }
  if (role == Role::kNone) {
    const std::string why = no_role != nullptr ? no_role : "no valid credentials";
    Refuse(context, RefusalKind::kUnauthenticated, method, "UNAUTHENTICATED", why);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
  }
  Refuse(context, RefusalKind::kPermissionDenied, method, "PERMISSION_DENIED", "read-only token");
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      std::string(method) +
                          " changes the process; the read-only token cannot call it");
}

grpc::Status ControlService::Inspect(grpc::ServerContext* context, Role role,
                                     const std::function<void()>& work,
                                     const std::function<bool()>& give_up) {
  if (hooks_.inspection == nullptr) {
    work();
    return grpc::Status::OK;
  }
  const absl::Status s = hooks_.inspection->Run(
      role == Role::kAdmin, [&] { return context->IsCancelled() || (give_up && give_up()); },
      work);
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(s.code() == absl::StatusCode::kResourceExhausted
                          ? grpc::StatusCode::RESOURCE_EXHAUSTED
                          : grpc::StatusCode::CANCELLED,
                      std::string(s.message()));
}

grpc::Status ControlService::InspectCall(grpc::ServerContext* context, Role role,
                                         const char* method,
                                         const google::protobuf::Message& request,
                                         google::protobuf::Message* response,
                                         const std::function<bool()>& give_up) {
  grpc::Status status;
  if (grpc::Status s = Inspect(
          context, role, [&] { status = admin_.Call(method, request, response); }, give_up);
      !s.ok()) {
    return s;
  }
  return status;
}

grpc::Status ControlService::GetRuntime(v1::RuntimeInfo* out) const {
  return admin_.CallJson("GetRuntime", "{}", out);
}

void ControlService::CountCall(const char* method) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  ++calls_[method];  // Our own method names: a fixed set of keys.
}

void ControlService::FillControlStats(v1::ControlStats* control) const {
  control->set_refused_connections(hooks_.refused_connections ? hooks_.refused_connections()
                                                              : 0);
  control->set_open_tcp_connections(
      static_cast<uint32_t>(hooks_.open_connections ? hooks_.open_connections() : 0));
  control->set_watchers(static_cast<uint32_t>(watchers()));
  control->set_draining(draining_.load(std::memory_order_relaxed));
  control->set_rejected_calls(refusals_->total(RefusalKind::kUnauthenticated) +
                              refusals_->total(RefusalKind::kPermissionDenied));
  if (hooks_.limiter != nullptr) {
    control->set_calls_over_limit(hooks_.limiter->refused_calls());
    control->set_cancelled_writes(hooks_.limiter->cancelled_writes());
  }
  if (hooks_.inspection != nullptr) {
    control->set_inspections_refused(hooks_.inspection->refused());
    control->set_inspection_throttled_seconds(
        static_cast<double>(hooks_.inspection->throttled_ns()) / 1e9);
  }
  {
    const auto now = RefusalLog::Clock::now();
    for (const PeerRefusals& p : refusals_->Snapshot()) {
      v1::PeerRefusals* out = control->add_refusals();
      out->set_peer(p.peer);
      out->set_client_subject(p.client_subject);
      out->set_refused_connections(p.connections);
      out->set_unauthenticated_calls(p.unauthenticated);
      out->set_permission_denied_calls(p.permission_denied);
      out->set_last_reason(p.last_reason);
      out->set_last_seconds_ago(std::chrono::duration<double>(now - p.last).count());
    }
    control->set_unlogged_refusals(refusals_->suppressed_lines());
  }
  std::lock_guard<std::mutex> lock(calls_mu_);
  for (const auto& [method, count] : calls_) (*control->mutable_calls())[method] = count;
}

std::string ControlService::ControlStatsJson() const {
  v1::ControlStats stats;
  FillControlStats(&stats);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(stats, &json, options).ok()) return "";
  return json;
}

grpc::Status ControlService::GetInfo(grpc::ServerContext* context, const v1::GetInfoRequest*,
                                     v1::GetInfoResponse* response) {
  if (grpc::Status s = Authorize(*context, false, "GetInfo"); !s.ok()) return s;
  response->set_pid(static_cast<uint32_t>(getpid()));
  response->set_mt_asyncio_version(MT_ASYNCIO_VERSION);
  *response->mutable_interpreter() = interpreter_;
  FillControlStats(response->mutable_control());
  return GetRuntime(response->mutable_runtime());
}

grpc::Status ControlService::GetMetrics(grpc::ServerContext* context,
                                        const v1::GetMetricsRequest* request,
                                        v1::GetMetricsResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "GetMetrics", &role); !s.ok()) return s;
  // The page is rendered in Python (mt_asyncio.metrics, which the HTTP
  // endpoint serves too); this service's counters travel with the call.
  const std::string stats_json = ControlStatsJson();
  if (stats_json.empty()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "control stats could not be encoded");
  }
  const std::string body = std::string("{\"openmetrics\":") +
                           (request->openmetrics() ? "true" : "false") +
                           ",\"control\":" + stats_json + "}";
  grpc::Status status;
  if (grpc::Status s = Inspect(context, role,
                               [&] { status = admin_.CallJson("GetMetrics", body, response); });
      !s.ok()) {
    return s;
  }
  return status;
}

grpc::Status ControlService::Diagnose(grpc::ServerContext* context,
                                      const v1::DiagnoseRequest* request,
                                      v1::DiagnoseResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "Diagnose", &role); !s.ok()) return s;
  const double window = request->spin_window_seconds();
  if (!(window >= 0 && window <= kMaxSpinWindowSeconds)) {
    return Invalid("spin_window_seconds must be from 0 to 5");
  }
  if (!(request->min_step_seconds() >= 0 && request->min_step_seconds() <= 86400)) {
    return Invalid("min_step_seconds must be from 0 to 86400");
  }
  // One turn of inspection: the window is slept through (no CPU charged),
  // and the other inspecting calls wait for it, which bounds how much of
  // the process concurrent Diagnose calls can take.
  return InspectCall(context, role, "Diagnose", *request, response);
}

grpc::Status ControlService::ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "ListWorkers", &role); !s.ok()) return s;
  grpc::Status status = admin_.CallJson("ListWorkers", "{}", response);
  if (!status.ok()) return status;
  // Names of the running units, best effort: this needs the interpreter,
  // and the figures above must come back even when it is out of reach.
  std::string ids;
  for (const v1::WorkerInfo& w : response->workers()) {
    if (w.current_task_id() == 0) continue;
    if (!ids.empty()) ids += ",";
    ids += std::to_string(w.current_task_id());
  }
  if (ids.empty()) return grpc::Status::OK;
  v1::TaskNames names;
  grpc::Status named;
  if (!Inspect(context, role, [&] {
        named = admin_.CallJson("TaskNames", "{\"ids\":\"" + ids + "\"}", &names);
      }).ok() ||
      !named.ok()) {
    return grpc::Status::OK;
  }
  for (v1::WorkerInfo& w : *response->mutable_workers()) {
    auto it = names.names().find(w.current_task_id());
    if (it != names.names().end()) w.set_current_task_name(it->second);
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::ListLoops(grpc::ServerContext* context, const v1::ListLoopsRequest* request,
                                       v1::ListLoopsResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "ListLoops", &role); !s.ok()) return s;
  return InspectCall(context, role, "ListLoops", *request, response);
}

grpc::Status ControlService::ListTasks(grpc::ServerContext* context, const v1::ListTasksRequest* request,
                                       v1::ListTasksResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "ListTasks", &role); !s.ok()) return s;
  if (request->name_contains().size() > 1024) return Invalid("name_contains is too long");
  if (request->page_token().size() > 64) return Invalid("invalid page_token");
  return InspectCall(context, role, "ListTasks", *request, response);
}

grpc::Status ControlService::GetTask(grpc::ServerContext* context, const v1::GetTaskRequest* request,
                                     v1::GetTaskResponse* response) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "GetTask", &role); !s.ok()) return s;
  if (request->id() == 0) return Invalid("id must be a task id (ListTasks shows them)");
  return InspectCall(context, role, "GetTask", *request, response);
}

grpc::Status ControlService::CancelTask(grpc::ServerContext* context,
                                        const v1::CancelTaskRequest* request,
                                        v1::CancelTaskResponse* response) {
  if (grpc::Status s = Authorize(*context, true, "CancelTask"); !s.ok()) return s;
  if (request->id() == 0) return Invalid("id must be a task id (ListTasks shows them)");
  if (request->msg().size() > 4096) return Invalid("msg is longer than 4096 bytes");
  // Finding the task walks every task in Python, like ListTasks.
  grpc::Status status = InspectCall(context, Role::kAdmin, "CancelTask", *request, response);
  Audit(*context, "CancelTask id=" + std::to_string(request->id()) + " -> " +
                      (status.ok() ? (response->cancelled() ? "cancelled" : "not cancelled")
                                   : status.error_message()));
  return status;
}

grpc::Status ControlService::ResizeWorkers(grpc::ServerContext* context,
                                           const v1::ResizeWorkersRequest* request,
                                           v1::ResizeWorkersResponse* response) {
  if (grpc::Status s = Authorize(*context, true, "ResizeWorkers"); !s.ok()) return s;
  const double wait = request->wait_seconds();
  if (!(wait >= 0 && wait <= kMaxWaitSeconds)) {
    return Invalid("wait_seconds must be in [0, 600]");
  }
  // The core takes the request as it is (it ignores wait_seconds).
  grpc::Status status = admin_.Call("ResizeWorkers", *request, response);
  Audit(*context, "ResizeWorkers target=" + std::to_string(request->target()) + " -> " +
                      (status.ok() ? "ok" : status.error_message()));
  if (!status.ok() || wait == 0) return status;
  // Converged when as many workers run as asked (retiring ones gone).
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
  while (true) {
    v1::RuntimeInfo info;
    if (!GetRuntime(&info).ok()) break;
    response->set_live_workers(info.live_workers());
    response->set_converged(info.live_workers() == response->target());
    if (response->converged() || Clock::now() >= deadline) break;
    if (!SleepUnlessCancelled(context, std::chrono::milliseconds(10))) break;
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::SetBlockingPool(grpc::ServerContext* context,
                                             const v1::SetBlockingPoolRequest* request,
                                             v1::SetBlockingPoolResponse* response) {
  if (grpc::Status s = Authorize(*context, true, "SetBlockingPool"); !s.ok()) return s;
  if (request->max_threads() == 0 && request->idle_ttl_seconds() == 0) {
    return Invalid("give max_threads, idle_ttl_seconds or both");
  }
  grpc::Status status = admin_.Call("SetBlockingPool", *request, response);
  Audit(*context, "SetBlockingPool max_threads=" + std::to_string(request->max_threads()) +
                      " idle_ttl_seconds=" + std::to_string(request->idle_ttl_seconds()) +
                      " -> " + (status.ok() ? "ok" : status.error_message()));
  return status;
}

grpc::Status ControlService::Watch(grpc::ServerContext* context, const v1::WatchRequest* request,
                                   grpc::ServerWriter<v1::WatchUpdate>* writer) {
  Role role = Role::kNone;
  if (grpc::Status s = Authorize(*context, false, "Watch", &role); !s.ok()) return s;
  double interval = request->interval_seconds();
  if (interval == 0) interval = 1.0;
  if (!(interval >= limits_.min_watch_interval_seconds && interval <= 3600)) {
    return Invalid("interval_seconds must be in [0.1, 3600] (0: 1 s)");
  }
  if (watchers_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_watchers) {
    watchers_.fetch_sub(1, std::memory_order_relaxed);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many Watch streams open (" +
                            std::to_string(limits_.max_watchers) + ")");
  }
  if (hooks_.limiter != nullptr) hooks_.limiter->GuardWrites(*context);
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
  const auto start = Clock::now();
  std::uint64_t sequence = 0;
  std::uint64_t due = 0;  // Ticks of the interval since the start.
  grpc::Status result = grpc::Status::OK;
  while (!context->IsCancelled()) {
    v1::WatchUpdate update;
    update.set_sequence(++sequence);
    // A client slower than the interval holds Write back (flow control):
    // the ticks that passed meanwhile are skipped, never queued.
    const auto ticks = static_cast<std::uint64_t>((Clock::now() - start) / period);
    update.set_skipped(ticks > due ? ticks - due : 0);
    due = ticks + 1;
    grpc::Status status = GetRuntime(update.mutable_runtime());
    if (!status.ok()) {
      result = status;
      break;
    }
    if (request->include_loops()) {
      // Pending counts only: a pass over every task at every tick would
      // cost the workload (measured: docs/benchmarks.md).
      v1::ListLoopsRequest counts_only;
      counts_only.set_skip_task_states(true);
      v1::ListLoopsResponse loops;
      // A tick whose turn does not come before the next one is due goes
      // without its loops rather than late.
      const auto next_due = start + due * period;
      if (InspectCall(context, role, "ListLoops", counts_only, &loops,
                      [&] { return Clock::now() >= next_due; })
              .ok()) {
        *update.mutable_loops() = std::move(*loops.mutable_loops());
      }
    }
    if (!writer->Write(update)) break;  // The client went away (or never read).
    if (hooks_.limiter != nullptr) hooks_.limiter->WriteDone(*context);
    if (!SleepUnlessCancelled(context, start + due * period - Clock::now())) break;
  }
  watchers_.fetch_sub(1, std::memory_order_relaxed);
  return result;
}

grpc::Status ControlService::Drain(grpc::ServerContext* context, const v1::DrainRequest*,
                                   v1::DrainResponse* response) {
  if (grpc::Status s = Authorize(*context, true, "Drain"); !s.ok()) return s;
  const bool was = draining_.exchange(true, std::memory_order_relaxed);
  response->set_already_draining(was);
  if (hooks_.set_serving) hooks_.set_serving(false);
  Audit(*context, std::string("Drain -> NOT_SERVING") + (was ? " (already)" : ""));
  return grpc::Status::OK;
}

grpc::Status ControlService::Shutdown(grpc::ServerContext* context,
                                      const v1::ShutdownRequest* request,
                                      grpc::ServerWriter<v1::ShutdownProgress>* writer) {
  if (grpc::Status s = Authorize(*context, true, "Shutdown"); !s.ok()) return s;
  const double grace = request->grace_seconds();
  if (!(grace >= 0 && grace <= 3600)) return Invalid("grace_seconds must be in [0, 3600]");
  v1::ShutdownProgress begun;  // The core answers {"joined": ...}.
  grpc::Status status = admin_.Call("Shutdown", *request, &begun);
  Audit(*context, "Shutdown grace_seconds=" + std::to_string(grace) + " mode=" +
                      v1::ShutdownMode_Name(request->mode()) + " -> " +
                      (status.ok() ? (begun.joined() ? "joined" : "begun")
                                   : status.error_message()));
  if (!status.ok()) return status;
  const bool joined = begun.joined();
  if (draining_.exchange(true, std::memory_order_relaxed) == false && hooks_.set_serving) {
    hooks_.set_serving(false);  // Out of rotation while it winds down.
  }
  if (hooks_.limiter != nullptr) hooks_.limiter->GuardWrites(*context);
  const auto start = Clock::now();
  v1::RuntimeState last = v1::RUNTIME_STATE_UNSPECIFIED;
  std::uint64_t last_tasks = ~std::uint64_t{0};
  while (true) {
    v1::RuntimeInfo info;
    if (!GetRuntime(&info).ok()) break;
    // One message per change of phase or count, and one every second.
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (info.state() != last || info.tasks_in_flight() != last_tasks ||
        std::fmod(elapsed, 1.0) < 0.05) {
      v1::ShutdownProgress progress;
      progress.set_state(info.state());
      progress.set_tasks_in_flight(info.tasks_in_flight());
      progress.set_blocking_running(info.blocking().running());
      progress.set_elapsed_seconds(elapsed);
      progress.set_joined(joined);
      if (!writer->Write(progress)) break;
      if (hooks_.limiter != nullptr) hooks_.limiter->WriteDone(*context);
      last = info.state();
      last_tasks = info.tasks_in_flight();
    }
    if (info.state() == v1::RUNTIME_STATE_STOPPED) break;
    if (!SleepUnlessCancelled(context, std::chrono::milliseconds(50))) break;
  }
  return grpc::Status::OK;
}

}  // namespace mt::control
