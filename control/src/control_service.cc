#include "control/src/control_service.h"

#include <unistd.h>

#include <chrono>
#include <utility>

namespace mt::control {
namespace {

v1::RuntimeState ToWire(runtime::admin::RuntimeState state) {
  using runtime::admin::RuntimeState;
  switch (state) {
    case RuntimeState::kCreated:
      return v1::RUNTIME_STATE_CREATED;
    case RuntimeState::kRunning:
      return v1::RUNTIME_STATE_RUNNING;
    case RuntimeState::kDraining:
      return v1::RUNTIME_STATE_DRAINING;
    case RuntimeState::kCancelling:
      return v1::RUNTIME_STATE_CANCELLING;
    case RuntimeState::kStopping:
      return v1::RUNTIME_STATE_STOPPING;
    case RuntimeState::kStopped:
      return v1::RUNTIME_STATE_STOPPED;
  }
  return v1::RUNTIME_STATE_UNSPECIFIED;
}

}  // namespace

ControlService::ControlService(const runtime::admin::AdminApi* admin,
                               v1::InterpreterInfo interpreter)
    : admin_(admin), interpreter_(std::move(interpreter)) {}

void FillRuntimeInfo(const runtime::admin::RuntimeSnapshot& snap,
                     v1::RuntimeInfo* out) {
  out->set_state(ToWire(snap.state));
  v1::RuntimeConfig* config = out->mutable_config();
  config->set_worker_threads(static_cast<uint32_t>(snap.worker_threads));
  config->set_blocking_threads_max(
      static_cast<uint32_t>(snap.config.blocking_threads_max));
  config->set_blocking_idle_ttl_seconds(
      std::chrono::duration<double>(snap.config.blocking_idle_ttl).count());
  out->set_live_workers(static_cast<uint32_t>(snap.live_workers));
  out->set_injector_depth(snap.injector_depth);
  out->set_uptime_seconds(snap.uptime_seconds);
  for (const auto& w : snap.workers) {
    v1::WorkerInfo* wi = out->add_workers();
    wi->set_index(static_cast<uint32_t>(w.index));
    wi->set_units_run(w.units_run);
    wi->set_parks(w.parks);
    wi->set_busy_ns(w.busy_ns);
  }
}

grpc::Status ControlService::GetInfo(grpc::ServerContext* /*context*/,
                                     const v1::GetInfoRequest* /*request*/,
                                     v1::GetInfoResponse* response) {
  response->set_pid(static_cast<uint32_t>(getpid()));
  response->set_mt_asyncio_version(MT_ASYNCIO_VERSION);
  *response->mutable_interpreter() = interpreter_;
  FillRuntimeInfo(admin_->Snapshot(), response->mutable_runtime());
  return grpc::Status::OK;
}

}  // namespace mt::control
