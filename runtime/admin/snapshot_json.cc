#include "runtime/admin/snapshot_json.h"

#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace mt::runtime::admin {
namespace {

double Seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

// "running" -> "RUNTIME_STATE_RUNNING": the proto enum's value name.
std::string EnumName(std::string_view prefix, std::string_view name) {
  return absl::StrCat(std::string(prefix), absl::AsciiStrToUpper(std::string(name)));
}

}  // namespace

void WriteWorker(JsonWriter& json, const WorkerSnapshot& w) {
  json.BeginObject()
      .Field("index", w.index)
      .Field("units_run", w.units_run)
      .Field("parks", w.parks)
      .Field("busy_ns", w.busy_ns)
      .Field("active", w.active)
      .Field("state", EnumName("WORKER_STATE_", WorkerStateName(w.state)))
      .Field("os_thread_id", static_cast<std::int64_t>(w.os_thread_id))
      .Field("current_task_id", w.current_task_id)
      .Field("current_task_running_ns", w.current_task_running_ns)
      .Field("stalled", w.stalled)
      .Field("local_queue_depth", w.local_queue_depth)
      .Field("lifo_occupied", w.lifo_occupied)
      .Field("steals", w.steals)
      .Field("stolen_units", w.stolen_units)
      .Field("stolen_from", w.stolen_from)
      .Field("reactor_polls", w.reactor_polls)
      .Field("overflows", w.overflows)
      .EndObject();
}

void WriteBlockingPool(JsonWriter& json, const blocking::BlockingPoolStats& b) {
  json.BeginObject()
      .Field("threads", b.threads)
      .Field("idle", b.idle)
      .Field("running", b.running)
      .Field("queued", b.queued)
      .Field("max_threads", b.max_threads)
      .Field("idle_ttl_seconds", Seconds(b.idle_ttl))
      .Field("completed", b.completed)
      .Field("cancelled", b.cancelled)
      .Field("abandoned", b.abandoned)
      .EndObject();
}

void WriteRuntimeInfo(JsonWriter& json, const RuntimeSnapshot& snap) {
  json.BeginObject();
  json.Field("state", EnumName("RUNTIME_STATE_", RuntimeStateName(snap.state)));
  // Live values: the blocking pool's after any change, not the startup
  // configuration's (before a runtime starts, the configuration's).
  const bool started = snap.state != RuntimeState::kCreated;
  json.Key("config")
      .BeginObject()
      .Field("worker_threads", snap.worker_threads)
      .Field("blocking_threads_max",
             started ? snap.blocking.max_threads : snap.config.blocking_threads_max)
      .Field("blocking_idle_ttl_seconds",
             Seconds(started ? snap.blocking.idle_ttl : snap.config.blocking_idle_ttl))
      .Field("stall_threshold_seconds", Seconds(snap.config.stall_threshold))
      .Field("shutdown_grace_seconds", Seconds(snap.config.shutdown_grace))
      .Field("reactor_mode", std::string(ReactorModeName(snap.config.reactor)))
      .Field("max_workers", snap.max_workers)
      .EndObject();
  json.Field("live_workers", snap.live_workers)
      .Field("injector_depth", snap.injector_depth)
      .Field("uptime_seconds", snap.uptime_seconds)
      .Field("searching_workers", snap.searching_workers)
      .Field("parked_workers", snap.parked_workers)
      .Field("tasks_in_flight", snap.tasks_in_flight)
      .Field("timers_pending", snap.timers_pending)
      .Field("fds_registered", snap.fds_registered)
      .Field("stalls_detected", snap.stalls_detected)
      .Field("stand_ins_started", snap.stand_ins_started)
      .Field("stand_in_units_run", snap.stand_in_units_run)
      .Field("dedicated_reactor_polls", snap.dedicated_reactor_polls);
  json.Key("blocking");
  WriteBlockingPool(json, snap.blocking);
  json.Key("workers").BeginArray();
  for (const WorkerSnapshot& w : snap.workers) WriteWorker(json, w);
  json.EndArray();
  json.EndObject();
}

std::string RuntimeSnapshotToJson(const RuntimeSnapshot& snap) {
  JsonWriter json;
  WriteRuntimeInfo(json, snap);
  return json.Take();
}

}  // namespace mt::runtime::admin
