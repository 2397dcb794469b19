#ifndef MT_CONTROL_SRC_CONTROL_SERVICE_H_
#define MT_CONTROL_SRC_CONTROL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "control/src/admin_client.h"
#include "control/src/call_limiter.h"
#include "control/src/inspection_budget.h"
#include "control/src/token_auth.h"
#include "mt/control/v1/control.grpc.pb.h"

namespace mt::control {

// Limits the service enforces on its callers.
struct ServiceLimits {
  int max_watchers = 32;  // Watch streams open at once.
  double min_watch_interval_seconds = 0.1;
};

// What the service needs from the server around it.
struct ServiceHooks {
  // Flips grpc.health.v1 for the whole server (Drain).
  std::function<void(bool serving)> set_serving;
  // Who is behind a call, for the audit line of mutating calls.
  std::function<std::string(const grpc::ServerContext&)> identify;
  // Connections the listener refused (GetInfo's control stats).
  std::function<std::uint64_t()> refused_connections;
  // TCP connections open now (GetInfo's control stats).
  std::function<int()> open_connections;
  // Where audit lines go (default: stderr).
  std::function<void(const std::string&)> audit;
  // What the caller of a call may do (default: everything); for kNone,
  // `why` says what was wrong with its credentials.
  std::function<Role(const grpc::ServerContext&, const char** why)> role;
  // Where refusals are counted by peer and logged at a bounded rate,
  // including those made before a call reaches the service (default: a
  // log of the service's own, writing to `audit`).
  std::shared_ptr<RefusalLog> refusals;
  // The caps on calls in flight and the write deadline (default: none).
  CallLimiter* limiter = nullptr;
  // The lane and CPU budget of the methods that run Python (default:
  // none: they run at once, in parallel).
  InspectionBudget* inspection = nullptr;
  // Who is behind a call over TLS (the TCP listener's connection), or
  // nullopt for the Unix socket (default: nobody).
  std::function<std::optional<TlsPeer>(const grpc::ServerContext&)> tls_peer;
};

// mt.control.v1.RuntimeControl over the admin boundary. Handlers run on
// gRPC's threads. Runtime and worker methods never touch the interpreter
// (they answer while every worker is busy); loop and task methods attach
// to it through the core's Python handler.
class ControlService final : public v1::RuntimeControl::Service {
 public:
  ControlService(AdminClient admin, v1::InterpreterInfo interpreter, ServiceHooks hooks,
                 ServiceLimits limits = {});

  grpc::Status GetInfo(grpc::ServerContext* context, const v1::GetInfoRequest* request,
                       v1::GetInfoResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status ListLoops(grpc::ServerContext* context, const v1::ListLoopsRequest* request,
                         v1::ListLoopsResponse* response) override;
  grpc::Status ListTasks(grpc::ServerContext* context, const v1::ListTasksRequest* request,
                         v1::ListTasksResponse* response) override;
  grpc::Status GetTask(grpc::ServerContext* context, const v1::GetTaskRequest* request,
                       v1::GetTaskResponse* response) override;
  grpc::Status CancelTask(grpc::ServerContext* context, const v1::CancelTaskRequest* request,
                          v1::CancelTaskResponse* response) override;
  grpc::Status ResizeWorkers(grpc::ServerContext* context,
                             const v1::ResizeWorkersRequest* request,
                             v1::ResizeWorkersResponse* response) override;
  grpc::Status SetBlockingPool(grpc::ServerContext* context,
                               const v1::SetBlockingPoolRequest* request,
                               v1::SetBlockingPoolResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::WatchUpdate>* writer) override;
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context, const v1::ShutdownRequest* request,
                        grpc::ServerWriter<v1::ShutdownProgress>* writer) override;

  grpc::Status GetMetrics(grpc::ServerContext* context, const v1::GetMetricsRequest* request,
                          v1::GetMetricsResponse* response) override;
  grpc::Status Diagnose(grpc::ServerContext* context, const v1::DiagnoseRequest* request,
                        v1::DiagnoseResponse* response) override;

  int watchers() const { return watchers_.load(std::memory_order_relaxed); }
  // What this service has seen (GetInfo's `control`).
  void FillControlStats(v1::ControlStats* control) const;
  // The same as proto3 JSON with proto field names (GetMetrics sends it
  // to the page's renderer; the process's own page asks for it), or ""
  // if it could not be encoded.
  std::string ControlStatsJson() const;

 private:
  void Audit(const grpc::ServerContext& context, const std::string& what) const;
  // Counts and logs a refused call (`code`: its status name).
  void Refuse(const grpc::ServerContext& context, RefusalKind kind, const char* method,
              const char* code, const std::string& why) const;
  // OK when the caller may make this call: any role may read, only admins
  // may change anything (`method` names the call in the denial). Sets
  // `*role` (when given) to the caller's role.
  grpc::Status Authorize(const grpc::ServerContext& context, bool mutating,
                         const char* method, Role* role = nullptr);
  // Runs `work` (a call that runs Python) in its turn of the inspection
  // budget (at once, on this thread, without a budget). `give_up` is
  // polled while waiting, as well as the call's cancellation. Not OK
  // when the turn never came: `work` has not run then.
  grpc::Status Inspect(grpc::ServerContext* context, Role role,
                       const std::function<void()>& work,
                       const std::function<bool()>& give_up = nullptr);
  // admin_.Call(method, ...) in its turn of the inspection budget
  // (`give_up` as for Inspect).
  grpc::Status InspectCall(grpc::ServerContext* context, Role role, const char* method,
                           const google::protobuf::Message& request,
                           google::protobuf::Message* response,
                           const std::function<bool()>& give_up = nullptr);
  // Counts an authorized call of `method` (ControlStats.calls).
  void CountCall(const char* method);
  // The core's GetRuntime document as the message.
  grpc::Status GetRuntime(v1::RuntimeInfo* out) const;

  const AdminClient admin_;
  const v1::InterpreterInfo interpreter_;
  const ServiceHooks hooks_;
  const std::shared_ptr<RefusalLog> refusals_;  // hooks_.refusals, or our own.
  const ServiceLimits limits_;
  std::atomic<int> watchers_{0};
  std::atomic<bool> draining_{false};
  mutable std::mutex calls_mu_;
  std::map<std::string, std::uint64_t> calls_;
};

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_CONTROL_SERVICE_H_
