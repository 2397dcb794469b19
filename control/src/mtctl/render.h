#ifndef MT_CONTROL_SRC_MTCTL_RENDER_H_
#define MT_CONTROL_SRC_MTCTL_RENDER_H_

// What mtctl prints of each answer, apart from fetching it: every function
// takes the response messages and writes text (or returns a line), so
// render_test.cc checks the output without a live process. Whatever the
// process put in a name, a path or a message goes through Escape() (the
// table's cells always do).

#include <google/protobuf/message.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "control/src/table.h"
#include "grpc/health/v1/health.pb.h"
#include "mt/control/v1/control.pb.h"

namespace mt::control::mtctl {

// proto3's JSON form with proto field names and every field present:
// stable for scripts. `pretty`: indented (one response); else one line
// (one object per streamed message).
std::string ToJson(const google::protobuf::Message& message, bool pretty);

// An enum value as operators read it: RUNTIME_STATE_RUNNING -> "running".
std::string StateName(v1::RuntimeState s);
std::string StateName(v1::WorkerState s);
std::string StateName(v1::LoopState s);
std::string StateName(v1::TaskState s);

// `mtctl info`.
void RenderInfo(const v1::GetInfoResponse& info, std::ostream& out);
// `mtctl workers`: the table, then the injector and blocking pool lines.
// Inactive worker slots only when `wide`.
void RenderWorkers(const v1::ListWorkersResponse& r, bool wide,
                   std::ostream& out);
// `mtctl loops`.
void RenderLoops(const v1::ListLoopsResponse& r, bool wide, std::ostream& out);

// The tables inside the renderings above, for mtctl across several
// targets (Table::Labeled puts them under a TARGET column).
Table WorkersTable(const v1::ListWorkersResponse& r, bool wide);
Table LoopsTable(const v1::ListLoopsResponse& r, bool wide);
Table TasksTable(const v1::ListTasksResponse& r, bool wide);
// One row per process: pid, state, workers, units in flight, uptime,
// health, versions.
Table InfoSummaryTable();
void AddInfoSummaryRow(const v1::GetInfoResponse& info, Table& table);
// `mtctl tasks`: the table, and how many matched when not all are shown.
void RenderTasks(const v1::ListTasksResponse& r, bool wide, std::ostream& out);
// `mtctl task ID`: the task, its stack and its await graph.
void RenderTask(const v1::GetTaskResponse& r, std::ostream& out);
// `mtctl doctor`: each finding (kind, summary, the stack of a long step or
// lost wakeup), the primitives tasks wait on, and a closing count.
void RenderDiagnosis(const v1::DiagnoseResponse& r, std::ostream& out);
// `mtctl top`, one screen (without the clearing escape).
void RenderTop(const v1::GetInfoResponse& info,
               const v1::ListWorkersResponse& workers,
               const v1::ListTasksResponse& tasks, std::ostream& out);

// One line each for the commands that change something.
std::string CancelLine(std::uint64_t id, const v1::CancelTaskResponse& r);
std::string ResizeWorkersLine(const v1::ResizeWorkersResponse& r);
std::string BlockingPoolLine(const v1::SetBlockingPoolResponse& r);
std::string DrainLine(const v1::DrainResponse& r);
std::string ShutdownLine(const v1::ShutdownProgress& p);
std::string HealthLine(const grpc::health::v1::HealthCheckResponse& r);

// `mtctl watch`: a line per update; units run are shown as the increase
// since the previous update of the same stream.
class WatchLines {
 public:
  explicit WatchLines(bool loops) : loops_(loops) {}
  std::string Next(const v1::WatchUpdate& u);

 private:
  const bool loops_;
  bool first_ = true;
  std::uint64_t last_units_ = 0;
};

}  // namespace mt::control::mtctl

#endif  // MT_CONTROL_SRC_MTCTL_RENDER_H_
