#include "control/src/mtctl/render.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mt::control::mtctl {
namespace {

std::string Lower(std::string name, std::string_view prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string Num(unsigned long long n) { return absl::StrFormat("%d", n); }

void AddTaskRow(Table& table, const v1::TaskInfo& t, bool wide) {
  std::vector<std::string> row = {
      Num(t.id()),
      Num(t.loop_id()),
      StateName(t.state()),
      Clip(t.name(), 24),
      Clip(t.coroutine(), 28),
      Duration(t.age_seconds()),
      Count(t.steps()),
      Duration(t.busy_ns() / 1e9),
      t.last_worker() >= 0 ? Num(t.last_worker()) : "-"};
  if (wide) {
    row.push_back(t.location());
    row.push_back(t.awaiting());
  } else {
    row.push_back(Clip(t.awaiting(), 40));
  }
  table.AddRow(std::move(row));
}

Table TaskTable(bool wide) {
  std::vector<std::string> header = {"ID",    "LOOP",      "STATE",
                                     "NAME",  "COROUTINE", "AGE",
                                     "STEPS", "BUSY",      "WORKER"};
  std::vector<bool> right = {true, true, false, false, false,
                             true, true, true,  true};
  if (wide) {
    header.push_back("SUSPENDED AT");
    right.push_back(false);
  }
  header.push_back("AWAITING");
  right.push_back(false);
  return Table(header, right);
}

}  // namespace

// proto3's JSON form with proto field names and every field present:
// stable for scripts. `pretty`: indented (one response); else one line
// (one object per streamed message).
std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = pretty;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, print);
  return json;
}

std::string StateName(v1::RuntimeState s) {
  return Lower(v1::RuntimeState_Name(s), "RUNTIME_STATE_");
}
std::string StateName(v1::WorkerState s) {
  return Lower(v1::WorkerState_Name(s), "WORKER_STATE_");
}
std::string StateName(v1::LoopState s) {
  return Lower(v1::LoopState_Name(s), "LOOP_STATE_");
}
std::string StateName(v1::TaskState s) {
  return Lower(v1::TaskState_Name(s), "TASK_STATE_");
}

void RenderInfo(const v1::GetInfoResponse& info, std::ostream& out) {
  const v1::InterpreterInfo& py = info.interpreter();
  const v1::RuntimeInfo& rt = info.runtime();
  const v1::RuntimeConfig& cfg = rt.config();
  out << absl::StrFormat("process      pid %d, mt_asyncio %s\n", info.pid(),
                         Escape(info.mt_asyncio_version()));
  out << absl::StrFormat(
      "interpreter  %s %s (%s, GIL %s) %s\n", Escape(py.implementation()),
      Escape(py.version()), py.free_threaded() ? "free-threaded" : "GIL build",
      py.gil_enabled() ? "enabled" : "disabled", Escape(py.executable()));
  out << absl::StrFormat("runtime      %s, uptime %s, reactor on %s\n",
                         StateName(rt.state()), Duration(rt.uptime_seconds()),
                         cfg.reactor_mode());
  out << absl::StrFormat(
      "workers      %d target, %d live (at most %d), %d searching, %d parked\n",
      cfg.worker_threads(), rt.live_workers(), cfg.max_workers(),
      rt.searching_workers(), rt.parked_workers());
  out << absl::StrFormat(
      "work         %d units in flight, %d injected, %d timers, %d fds\n",
      rt.tasks_in_flight(), rt.injector_depth(), rt.timers_pending(),
      rt.fds_registered());
  out << absl::StrFormat(
      "blocking     %d/%d threads (%d idle, %d running), %d queued, idle ttl "
      "%s\n",
      rt.blocking().threads(), cfg.blocking_threads_max(), rt.blocking().idle(),
      rt.blocking().running(), rt.blocking().queued(),
      Duration(cfg.blocking_idle_ttl_seconds()));
  out << absl::StrFormat("stalls       %d (threshold %s); shutdown grace %s\n",
                         rt.stalls_detected(),
                         Duration(cfg.stall_threshold_seconds()),
                         Duration(cfg.shutdown_grace_seconds()));
  out << absl::StrFormat(
      "control      %s, %d watchers, %d connections refused, %d calls "
      "rejected\n",
      info.control().draining() ? "draining" : "serving",
      info.control().watchers(), info.control().refused_connections(),
      info.control().rejected_calls());
  if (info.control().calls_over_limit() > 0 ||
      info.control().cancelled_writes() > 0) {
    out << absl::StrFormat(
        "limits       %d calls over a cap, %d cancelled for not reading their "
        "answer\n",
        info.control().calls_over_limit(), info.control().cancelled_writes());
  }
  if (info.control().inspection_throttled_seconds() > 0 ||
      info.control().inspections_refused() > 0) {
    out << absl::StrFormat(
        "inspection   held back %s over its CPU share, %d read-only calls "
        "refused\n",
        Duration(info.control().inspection_throttled_seconds()),
        info.control().inspections_refused());
  }
  // The peers refused most, one line each (-o json has them all).
  const auto& refusals = info.control().refusals();
  for (int i = 0; i < refusals.size() && i < 5; ++i) {
    const v1::PeerRefusals& p = refusals[i];
    std::string what;
    if (p.refused_connections() > 0)
      what += absl::StrFormat(", %d connections", p.refused_connections());
    if (p.unauthenticated_calls() > 0) {
      what +=
          absl::StrFormat(", %d unauthenticated", p.unauthenticated_calls());
    }
    if (p.permission_denied_calls() > 0) {
      what += absl::StrFormat(", %d denied", p.permission_denied_calls());
    }
    out << absl::StrFormat(
        "refused      %s%s%s; last %s ago: %s\n", Escape(p.peer()),
        p.client_subject().empty() ? ""
                                   : " (" + Escape(p.client_subject()) + ")",
        what, Duration(p.last_seconds_ago()), Escape(p.last_reason()));
  }
  if (refusals.size() > 5)
    out << absl::StrFormat("refused      and %d more peers\n",
                           refusals.size() - 5);
}

void RenderWorkers(const v1::ListWorkersResponse& r, bool wide,
                   std::ostream& out) {
  WorkersTable(r, wide).Print(out);
  const v1::BlockingPoolInfo& b = r.blocking();
  out << absl::StrFormat("\nworkers: %d target, %d live; injector: %d queued\n",
                         r.target_workers(), r.live_workers(),
                         r.injector_depth());
  out << absl::StrFormat(
      "blocking: %d/%d threads, %d idle, %d running, %d queued, idle ttl %s, "
      "%d completed\n",
      b.threads(), b.max_threads(), b.idle(), b.running(), b.queued(),
      Duration(b.idle_ttl_seconds()), b.completed());
}

Table WorkersTable(const v1::ListWorkersResponse& r, bool wide) {
  std::vector<std::string> header = {"IDX",   "TID",   "STATE",
                                     "UNITS", "BUSY",  "STEALS",
                                     "PARKS", "QUEUE", "LIFO"};
  std::vector<bool> right = {true, true, false, true, true,
                             true, true, true,  false};
  if (wide) {
    for (const char* h :
         {"STOLEN_UNITS", "STOLEN_FROM", "REACTOR_POLLS", "OVERFLOWS"}) {
      header.push_back(h);
      right.push_back(true);
    }
  }
  header.push_back("RUNNING");
  right.push_back(false);
  Table table(header, right);
  for (const v1::WorkerInfo& w : r.workers()) {
    if (!w.active() && !wide) continue;
    std::vector<std::string> row = {Num(w.index()),
                                    Num(w.os_thread_id()),
                                    StateName(w.state()),
                                    Count(w.units_run()),
                                    Duration(w.busy_ns() / 1e9),
                                    Count(w.steals()),
                                    Count(w.parks()),
                                    Num(w.local_queue_depth()),
                                    w.lifo_occupied() ? "yes" : "-"};
    if (wide) {
      for (auto v : {w.stolen_units(), w.stolen_from(), w.reactor_polls(),
                     w.overflows()}) {
        row.push_back(Count(v));
      }
    }
    std::string running = "-";
    if (w.current_task_id() != 0) {
      running = absl::StrFormat("%d", w.current_task_id());
      if (!w.current_task_name().empty())
        running += " " + Clip(w.current_task_name(), 32);
      if (w.current_task_running_ns() > 0) {
        running += " for " + Duration(w.current_task_running_ns() / 1e9);
      }
      if (w.stalled()) running += " STALLED";
    }
    row.push_back(running);
    table.AddRow(std::move(row));
  }
  return table;
}

void RenderLoops(const v1::ListLoopsResponse& r, bool wide, std::ostream& out) {
  LoopsTable(r, wide).Print(out);
}

Table LoopsTable(const v1::ListLoopsResponse& r, bool wide) {
  std::vector<std::string> header = {"ID",    "STATE",   "TASKS",   "RUNNING",
                                     "READY", "WAITING", "CREATED", "DEFERRED",
                                     "SLOW",  "DEBUG",   "THREAD"};
  std::vector<bool> right = {true, false, true, true,  true, true,
                             true, true,  true, false, true};
  if (wide) {
    header.push_back("TYPE");
    right.push_back(false);
  }
  Table table(header, right);
  for (const v1::LoopInfo& l : r.loops()) {
    std::vector<std::string> row = {Num(l.id()),
                                    StateName(l.state()),
                                    Count(l.tasks().pending()),
                                    Count(l.tasks().running()),
                                    Count(l.tasks().ready()),
                                    Count(l.tasks().waiting()),
                                    Count(l.tasks_created()),
                                    Count(l.deferred_callbacks()),
                                    Count(l.slow_steps()),
                                    l.debug() ? "on" : "off",
                                    l.thread_id() ? Num(l.thread_id()) : "-"};
    if (wide) row.push_back(l.type());
    table.AddRow(std::move(row));
  }
  return table;
}

Table TasksTable(const v1::ListTasksResponse& r, bool wide) {
  Table table = TaskTable(wide);
  for (const v1::TaskInfo& t : r.tasks()) AddTaskRow(table, t, wide);
  return table;
}

Table InfoSummaryTable() {
  return Table({"PID", "STATE", "WORKERS", "LIVE", "UNITS", "UPTIME", "HEALTH", "VERSION",
                "PYTHON"},
               {true, false, true, true, true, true, false, false, false});
}

void AddInfoSummaryRow(const v1::GetInfoResponse& info, Table& table) {
  const v1::RuntimeInfo& rt = info.runtime();
  table.AddRow({Num(info.pid()), StateName(rt.state()), Num(rt.config().worker_threads()),
                Num(rt.live_workers()), Count(rt.tasks_in_flight()),
                Duration(rt.uptime_seconds()),
                info.control().draining() ? "draining" : "serving",
                info.mt_asyncio_version(),
                info.interpreter().version() + (info.interpreter().free_threaded() ? "t" : "")});
}

void RenderTasks(const v1::ListTasksResponse& r, bool wide, std::ostream& out) {
  TasksTable(r, wide).Print(out);
  if (static_cast<std::uint64_t>(r.tasks_size()) < r.total_matching()) {
    out << absl::StrFormat(
        "\n%d of %d tasks shown (--limit N or --all for more)\n",
        r.tasks_size(), r.total_matching());
  }
}

void RenderTask(const v1::GetTaskResponse& r, std::ostream& out) {
  const v1::TaskInfo& t = r.task();
  out << absl::StrFormat("task %d %s on loop %d: %s, coroutine %s\n", t.id(),
                         Escape(t.name()), t.loop_id(), StateName(t.state()),
                         Escape(t.coroutine()));
  out << absl::StrFormat(
      "age %s, %d steps, busy %s, last on worker %d, cancelling %d\n",
      Duration(t.age_seconds()), t.steps(), Duration(t.busy_ns() / 1e9),
      t.last_worker(), t.cancelling());
  if (!t.awaiting().empty())
    out << absl::StrFormat("awaiting %s\n", Escape(t.awaiting()));
  if (r.awaited_by_size() > 0) {
    std::string ids;
    for (auto w : r.awaited_by()) ids += (ids.empty() ? "" : ", ") + Num(w);
    out << absl::StrFormat("awaited by tasks %s\n", ids);
  }
  out << "\nstack (innermost last):\n";
  if (r.stack_size() == 0)
    out << "  (none: the task is running or has no frames)\n";
  for (const v1::FrameInfo& f : r.stack()) {
    out << absl::StrFormat("  File \"%s\", line %d, in %s\n", Escape(f.file()),
                           f.line(), Escape(f.function()));
  }
  // The graph is lines of text from the process: each is escaped, the
  // line breaks between them kept.
  std::vector<std::string> graph;
  for (absl::string_view line : absl::StrSplit(r.call_graph(), '\n')) {
    graph.push_back(Escape({line.data(), line.size()}));
  }
  out << absl::StrFormat("\nawait graph:\n%s\n", absl::StrJoin(graph, "\n"));
}

namespace {

const char* FindingName(v1::FindingKind kind) {
  switch (kind) {
    case v1::FINDING_KIND_LOST_WAKEUP:
      return "LOST WAKEUP";
    case v1::FINDING_KIND_LONG_STEP:
      return "LONG STEP";
    case v1::FINDING_KIND_SPINNING:
      return "SPINNING";
    case v1::FINDING_KIND_DEADLOCK:
      return "DEADLOCK";
    default:
      return "FINDING";
  }
}

std::string TaskLabel(std::uint64_t id, const std::string& name) {
  if (id == 0) return "-";
  return name.empty() ? Num(id) : absl::StrFormat("%d %s", id, name);
}

}  // namespace

void RenderDiagnosis(const v1::DiagnoseResponse& r, std::ostream& out) {
  for (const v1::Finding& f : r.findings()) {
    out << absl::StrFormat("%-12s %s\n", FindingName(f.kind()), Escape(f.summary()));
    for (const v1::TaskInfo& t : f.tasks()) {
      if (t.location().empty()) continue;
      out << absl::StrFormat("  task %d %s at %s\n", t.id(), Escape(t.name()),
                             Escape(t.location()));
    }
    if (f.stack_size() > 0) out << "  stack (innermost last):\n";
    for (const v1::FrameInfo& frame : f.stack()) {
      out << absl::StrFormat("    File \"%s\", line %d, in %s\n", Escape(frame.file()),
                             frame.line(), Escape(frame.function()));
    }
    if (!f.stack_note().empty()) out << "  (" << Escape(f.stack_note()) << ")\n";
  }
  if (r.primitives_size() > 0) {
    if (r.findings_size() > 0) out << "\n";
    Table table({"PRIMITIVE", "HOLDER", "WAITERS", "REPR"});
    for (const v1::PrimitiveInfo& p : r.primitives()) {
      std::vector<std::string> waiters;
      for (const v1::PrimitiveWaiter& w : p.waiters()) {
        waiters.push_back(TaskLabel(w.task_id(), w.task_name()) + " (" + w.role() + ")");
      }
      // Table escapes every cell.
      table.AddRow({p.kind(), TaskLabel(p.holder_task_id(), p.holder_task_name()),
                    absl::StrJoin(waiters, ", "), p.repr()});
    }
    table.Print(out);
  }
  if (r.findings_size() > 0) out << "\n";
  if (r.waits_checked() < r.waits_total()) {
    out << absl::StrFormat(
        "checked %d of %d waits for lost wakeups (each call checks the next ones)\n",
        r.waits_checked(), r.waits_total());
  }
  out << absl::StrFormat("%s in %d tasks (spin window %s; %d long steps recorded)\n",
                         r.findings_size() == 0
                             ? std::string("no problems found")
                             : absl::StrFormat("%d finding%s", r.findings_size(),
                                               r.findings_size() == 1 ? "" : "s"),
                         r.tasks_examined(), Duration(r.spin_window_seconds()),
                         r.long_steps_recorded());
}

void RenderTop(const v1::GetInfoResponse& info,
               const v1::ListWorkersResponse& workers,
               const v1::ListTasksResponse& tasks, std::ostream& out) {
  out << absl::StrFormat(
      "mtctl top - pid %d - %s - %s - %d tasks - q quits\n\n", info.pid(),
      StateName(info.runtime().state()),
      Duration(info.runtime().uptime_seconds()), tasks.total_matching());
  RenderWorkers(workers, false, out);
  std::vector<v1::TaskInfo> busiest(tasks.tasks().begin(), tasks.tasks().end());
  std::sort(busiest.begin(), busiest.end(),
            [](const v1::TaskInfo& x, const v1::TaskInfo& y) {
              return x.busy_ns() > y.busy_ns();
            });
  if (busiest.size() > 15) busiest.resize(15);
  out << "\nbusiest tasks:\n";
  Table table = TaskTable(false);
  for (const v1::TaskInfo& t : busiest) AddTaskRow(table, t, false);
  table.Print(out);
}

std::string CancelLine(std::uint64_t id, const v1::CancelTaskResponse& r) {
  return r.cancelled() ? absl::StrFormat("task %d: cancel requested\n", id)
                       : absl::StrFormat(
                             "task %d: not cancelled (it is finishing)\n", id);
}

std::string ResizeWorkersLine(const v1::ResizeWorkersResponse& r) {
  return absl::StrFormat("workers: %d -> %d (%d live%s)\n", r.previous(),
                         r.target(), r.live_workers(),
                         r.converged() ? "" : ", converging");
}

std::string BlockingPoolLine(const v1::SetBlockingPoolResponse& r) {
  return absl::StrFormat("blocking max threads: %d -> %d; idle ttl: %s -> %s\n",
                         r.previous_max_threads(), r.max_threads(),
                         Duration(r.previous_idle_ttl_seconds()),
                         Duration(r.idle_ttl_seconds()));
}

std::string DrainLine(const v1::DrainResponse& r) {
  return absl::StrFormat(
      "draining%s: health is NOT_SERVING; work goes on until shutdown\n",
      r.already_draining() ? " (already)" : "");
}

std::string ShutdownLine(const v1::ShutdownProgress& p) {
  return absl::StrFormat(
      "%7.2f s  %-10s  %d units in flight, %d blocking jobs running%s\n",
      p.elapsed_seconds(), StateName(p.state()), p.tasks_in_flight(),
      p.blocking_running(),
      p.joined() ? "  (joined a shutdown under way)" : "");
}

std::string HealthLine(const grpc::health::v1::HealthCheckResponse& r) {
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(r.status()) +
         "\n";
}

std::string WatchLines::Next(const v1::WatchUpdate& u) {
  std::uint64_t units = 0, busy = 0;
  for (const v1::WorkerInfo& w : u.runtime().workers()) {
    units += w.units_run();
    if (w.state() == v1::WORKER_STATE_RUNNING) ++busy;
  }
  std::uint64_t tasks = 0;
  for (const v1::LoopInfo& l : u.loops()) tasks += l.tasks().pending();
  std::string line = absl::StrFormat(
      "#%d %s  workers %d (%d running)  units +%d  injected %d  blocking "
      "%d/%d%s%s\n",
      u.sequence(), StateName(u.runtime().state()), u.runtime().live_workers(),
      busy, first_ ? 0 : units - last_units_, u.runtime().injector_depth(),
      u.runtime().blocking().running(), u.runtime().blocking().max_threads(),
      loops_ ? absl::StrFormat("  tasks %d", tasks) : "",
      u.skipped() ? absl::StrFormat("  (%d skipped)", u.skipped()) : "");
  first_ = false;
  last_units_ = units;
  return line;
}

}  // namespace mt::control::mtctl
