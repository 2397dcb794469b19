// mtctl's commands: each parses its own arguments, makes its calls through
// the Client and prints the answer through render.h (or as JSON).

#include "control/src/mtctl/commands.h"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "control/src/mtctl/client.h"
#include "control/src/mtctl/discovery.h"
#include "control/src/mtctl/render.h"
#include "control/src/table.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mt/control/v1/control.grpc.pb.h"

namespace mt::control::mtctl {
namespace {

// One unary call with an empty request: its response as JSON, or drawn by
// `render` (told whether -o wide was asked).
template <typename Request, typename Response, typename Render>
int ShowUnary(Client& c, const Options& o,
              grpc::Status (v1::RuntimeControl::Stub::*method)(
                  grpc::ClientContext*, const Request&, Response*),
              Render render) {
  Response r;
  grpc::Status s = (c.stub().*method)(c.Context().get(), Request(), &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    render(r, o.format == Format::kWide);
  }
  return kExitOk;
}

int CmdInfo(Client& c, const Options& o) {
  return ShowUnary(
      c, o, &v1::RuntimeControl::Stub::GetInfo,
      [](const v1::GetInfoResponse& r, bool) { RenderInfo(r, std::cout); });
}

int CmdWorkers(Client& c, const Options& o) {
  return ShowUnary(c, o, &v1::RuntimeControl::Stub::ListWorkers,
                   [](const v1::ListWorkersResponse& r, bool wide) {
                     RenderWorkers(r, wide, std::cout);
                   });
}

int CmdLoops(Client& c, const Options& o) {
  return ShowUnary(c, o, &v1::RuntimeControl::Stub::ListLoops,
                   [](const v1::ListLoopsResponse& r, bool wide) {
                     RenderLoops(r, wide, std::cout);
                   });
}

// What `tasks` asks: its filters, and how many to fetch.
struct TasksQuery {
  v1::ListTasksRequest request;
  double limit = 500;
  bool all = false;
};

// Parses tasks' arguments; -1 to go on, else the exit code.
int ParseTasksQuery(CommandArgs& a, TasksQuery* q) {
  double loop = 0;
  std::string state, name;
  if (a.Number("--loop", &loop, 0, 1e18) < 0) return kExitUsage;
  if (a.Number("--limit", &q->limit, 1, 1e9) < 0) return kExitUsage;
  if (a.Value("--state", &state) < 0 || a.Value("--name", &name) < 0)
    return kExitUsage;
  q->all = a.Flag("--all");
  if (!a.Done()) return kExitUsage;
  q->request.set_loop_id(static_cast<std::uint64_t>(loop));
  if (!state.empty()) {
    v1::TaskState s;
    std::string upper = "TASK_STATE_";
    for (char ch : state)
      upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (!v1::TaskState_Parse(upper, &s) || s == v1::TASK_STATE_UNSPECIFIED) {
      return UsageError("--state must be running, ready or waiting");
    }
    q->request.set_state(s);
  }
  q->request.set_name_contains(name);
  return -1;
}

// The pages of ListTasks the query asks for, gathered.
grpc::Status FetchTasks(Client& c, TasksQuery q, v1::ListTasksResponse* out) {
  while (true) {
    q.request.set_page_size(q.all ? 2000
                                  : static_cast<std::uint32_t>(std::min<double>(
                                        2000, q.limit - out->tasks_size())));
    v1::ListTasksResponse page;
    grpc::Status s = c.stub().ListTasks(c.Context().get(), q.request, &page);
    if (!s.ok()) return s;
    out->set_total_matching(page.total_matching());
    for (auto& t : *page.mutable_tasks()) *out->add_tasks() = std::move(t);
    if (page.next_page_token().empty() || (!q.all && out->tasks_size() >= q.limit)) {
      out->set_next_page_token(page.next_page_token());
      return grpc::Status::OK;
    }
    q.request.set_page_token(page.next_page_token());
  }
}

int CmdTasks(Client& c, const Options& o, CommandArgs& a) {
  TasksQuery q;
  if (const int rc = ParseTasksQuery(a, &q); rc >= 0) return rc;
  v1::ListTasksResponse out;
  if (grpc::Status s = FetchTasks(c, q, &out); !s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(out, true);
    return kExitOk;
  }
  RenderTasks(out, o.format == Format::kWide, std::cout);
  return kExitOk;
}

int CmdTask(Client& c, const Options& o, CommandArgs& a) {
  std::string id_text;
  if (!a.Positional(&id_text)) return UsageError("task needs a task id");
  double frames = 0;
  if (a.Number("--frames", &frames, 0, 1000) < 0 || !a.Done())
    return kExitUsage;
  v1::GetTaskRequest req;
  std::uint64_t id;
  if (!ParseId(id_text, &id)) return kExitUsage;
  req.set_id(id);
  req.set_max_frames(static_cast<std::uint32_t>(frames));
  v1::GetTaskResponse r;
  grpc::Status s = c.stub().GetTask(c.Context().get(), req, &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
    return kExitOk;
  }
  RenderTask(r, std::cout);
  return kExitOk;
}

int CmdCancel(Client& c, const Options& o, CommandArgs& a) {
  std::string id_text, msg;
  if (!a.Positional(&id_text)) return UsageError("cancel needs a task id");
  if (a.Value("--msg", &msg) < 0 || !a.Done()) return kExitUsage;
  std::uint64_t id;
  if (!ParseId(id_text, &id)) return kExitUsage;
  v1::CancelTaskRequest req;
  req.set_id(id);
  req.set_msg(msg);
  v1::CancelTaskResponse r;
  grpc::Status s = c.stub().CancelTask(c.Context().get(), req, &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    std::cout << CancelLine(id, r);
  }
  return kExitOk;
}

int CmdScale(Client& c, const Options& o, CommandArgs& a) {
  std::string what, count_text;
  if (!a.Positional(&what) || !a.Positional(&count_text)) {
    return UsageError(
        "usage: scale workers N [--wait S] | scale blocking N [--idle-ttl S]");
  }
  double count;
  if (!absl::SimpleAtod(count_text, &count) || count < 0 || count > 1e6 ||
      count != static_cast<double>(static_cast<std::uint32_t>(count))) {
    return UsageError("'" + count_text + "' is not a count");
  }
  if (what == "workers") {
    double wait = 0;
    if (a.Number("--wait", &wait, 0, 600) < 0 || !a.Done()) return kExitUsage;
    v1::ResizeWorkersRequest req;
    req.set_target(static_cast<std::uint32_t>(count));
    req.set_wait_seconds(wait);
    v1::ResizeWorkersResponse r;
    auto context = c.Context(false);
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(
                              (o.timeout_seconds + wait) * 1000)));
    grpc::Status s = c.stub().ResizeWorkers(context.get(), req, &r);
    if (!s.ok()) return c.Failed(s);
    if (o.format == Format::kJson) {
      std::cout << ToJson(r, true);
    } else {
      std::cout << ResizeWorkersLine(r);
    }
    return kExitOk;
  }
  if (what == "blocking") {
    double ttl = 0;
    if (a.Number("--idle-ttl", &ttl, 0, 86400) < 0 || !a.Done())
      return kExitUsage;
    v1::SetBlockingPoolRequest req;
    req.set_max_threads(static_cast<std::uint32_t>(count));
    req.set_idle_ttl_seconds(ttl);
    v1::SetBlockingPoolResponse r;
    grpc::Status s = c.stub().SetBlockingPool(c.Context().get(), req, &r);
    if (!s.ok()) return c.Failed(s);
    if (o.format == Format::kJson) {
      std::cout << ToJson(r, true);
    } else {
      std::cout << BlockingPoolLine(r);
    }
    return kExitOk;
  }
  return UsageError("scale what? workers or blocking");
}

int CmdDrain(Client& c, const Options& o) {
  v1::DrainResponse r;
  grpc::Status s = c.stub().Drain(c.Context().get(), v1::DrainRequest(), &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    std::cout << DrainLine(r);
  }
  return kExitOk;
}

// The metrics page, as a scraper of mt_asyncio.metrics would get it
// (--openmetrics: that format; -o json: the response message).
int CmdMetrics(Client& c, const Options& o, CommandArgs& a) {
  v1::GetMetricsRequest req;
  req.set_openmetrics(a.Flag("--openmetrics"));
  if (!a.Done()) return kExitUsage;
  v1::GetMetricsResponse r;
  grpc::Status s = c.stub().GetMetrics(c.Context().get(), req, &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    std::cout << r.text();
  }
  return kExitOk;
}

// What may be wrong with the process's tasks (the Diagnose call). Exits
// kExitFindings when it found something, so scripts and probes can act.
int CmdDoctor(Client& c, const Options& o, CommandArgs& a) {
  double window = 0;
  double min_step = 0;
  if (a.Number("--window", &window, 0, 5) < 0 || a.Number("--min-step", &min_step, 0, 86400) < 0 ||
      !a.Done()) {
    return kExitUsage;
  }
  v1::DiagnoseRequest req;
  req.set_spin_window_seconds(window);
  req.set_min_step_seconds(min_step);
  v1::DiagnoseResponse r;
  // The call watches the tasks for its window: the deadline leaves room.
  auto context = c.Context(false);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(
                            static_cast<long long>((o.timeout_seconds + window) * 1000)));
  grpc::Status s = c.stub().Diagnose(context.get(), req, &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    RenderDiagnosis(r, std::cout);
  }
  return r.findings_size() > 0 ? kExitFindings : kExitOk;
}

int CmdShutdown(Client& c, const Options& o, CommandArgs& a) {
  double grace = 0;
  if (a.Number("--grace", &grace, 0, 3600) < 0) return kExitUsage;
  const bool quick = a.Flag("--quick");
  const bool wait = a.Flag("--wait");
  if (!a.Done()) return kExitUsage;
  v1::ShutdownRequest req;
  req.set_grace_seconds(grace);
  req.set_mode(quick ? v1::SHUTDOWN_MODE_QUICK : v1::SHUTDOWN_MODE_GRACEFUL);
  auto context = c.Context(false);
  if (!wait) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(
                              o.timeout_seconds * 1000)));
  }
  auto reader = c.stub().Shutdown(context.get(), req);
  v1::ShutdownProgress p;
  bool any = false;
  v1::RuntimeState last = v1::RUNTIME_STATE_UNSPECIFIED;
  while (reader->Read(&p)) {
    any = true;
    last = p.state();
    if (o.format == Format::kJson) {
      std::cout << ToJson(p, false) << "\n" << std::flush;
    } else {
      std::cout << ShutdownLine(p) << std::flush;
    }
    if (!wait) {
      context->TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (!wait) {
    return any || s.ok() || s.error_code() == grpc::StatusCode::CANCELLED
               ? kExitOk
               : c.Failed(s);
  }
  if (s.ok()) return kExitOk;
  // The process may exit as soon as its runtime stopped: a stream cut
  // after the shutdown started is the end we waited for.
  if (any && s.error_code() == grpc::StatusCode::UNAVAILABLE &&
      last != v1::RUNTIME_STATE_RUNNING) {
    if (o.format != Format::kJson) std::cout << "process gone (exited)\n";
    return kExitOk;
  }
  return c.Failed(s);
}

int CmdWatch(Client& c, const Options& o, CommandArgs& a) {
  double interval = 1, count = 0;
  if (a.Number("--interval", &interval, 0.1, 3600) < 0) return kExitUsage;
  if (a.Number("--count", &count, 0, 1e12) < 0) return kExitUsage;
  const bool loops = a.Flag("--loops");
  if (!a.Done()) return kExitUsage;
  v1::WatchRequest req;
  req.set_interval_seconds(interval);
  req.set_include_loops(loops);
  auto context = c.Context(false);
  auto reader = c.stub().Watch(context.get(), req);
  v1::WatchUpdate u;
  std::uint64_t seen = 0;
  WatchLines lines(loops);
  while (reader->Read(&u)) {
    ++seen;
    if (o.format == Format::kJson) {
      std::cout << ToJson(u, false) << "\n" << std::flush;
    } else {
      std::cout << lines.Next(u) << std::flush;
    }
    if (count > 0 && seen >= count) {
      context->TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) return kExitOk;
  return c.Failed(s);
}

int CmdHealth(Client& c, const Options& o) {
  auto stub = grpc::health::v1::Health::NewStub(c.channel());
  grpc::health::v1::HealthCheckResponse r;
  grpc::Status s = stub->Check(c.Context().get(),
                               grpc::health::v1::HealthCheckRequest(), &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    std::cout << ToJson(r, true);
  } else {
    std::cout << HealthLine(r);
  }
  return r.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitFailed;
}

int CmdList(const Options& o) {
  const std::vector<std::string> sockets = SocketsInDefaultDir();
  Table table({"PID", "STATE", "WORKERS", "VERSION", "PYTHON", "SOCKET"},
              {true, false, true, false, false, false});
  std::string json = "[";
  for (const std::string& path : sockets) {
    Options one = o;
    one.target = "unix://" + path;
    Client c(one);
    v1::GetInfoResponse r;
    grpc::Status s =
        c.Connect(/*report=*/false) == kExitOk
            ? c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &r)
            : grpc::Status(grpc::StatusCode::UNAVAILABLE, "no socket");
    const std::string pid = SocketPid(path);
    if (!s.ok()) {
      const char* state = c.foreign()        ? "foreign"
                          : OwnerAlive(path) ? "unreachable"
                                             : "stale";
      table.AddRow({pid, state, "-", "-", "-", path});
      continue;
    }
    table.AddRow({absl::StrFormat("%d", r.pid()),
                  StateName(r.runtime().state()),
                  absl::StrFormat("%d", r.runtime().live_workers()),
                  r.mt_asyncio_version(),
                  r.interpreter().version() +
                      (r.interpreter().free_threaded() ? "t" : ""),
                  path});
    if (o.format == Format::kJson) {
      json += (json.size() > 1 ? "," : "") + std::string("{\"socket\":\"") +
              path + "\",\"info\":" + ToJson(r, false) + "}";
    }
  }
  if (o.format == Format::kJson) {
    std::cout << json << "]\n";
  } else if (table.empty()) {
    std::cout << "no mt_asyncio control sockets in " << DefaultSocketDir()
              << "\n";
  } else {
    table.Print(std::cout);
  }
  return kExitOk;
}

// top: redraws until 'q' (or Ctrl-C). The terminal is put in
// non-canonical mode only while it runs, and only if stdin is one.
class RawTerminal {
 public:
  RawTerminal() {
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  // Waits up to `ms` for a key; true if it was q. Without a terminal
  // (a script, a pipe) it only waits: --iterations or a signal ends it.
  bool WaitForQuit(int ms) const {
    if (!active_) {
      poll(nullptr, 0, ms);
      return false;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN)) {
      char ch = 0;
      const ssize_t n = read(STDIN_FILENO, &ch, 1);
      return n == 1 && (ch == 'q' || ch == 'Q');
    }
    return false;
  }

 private:
  termios saved_{};
  bool active_ = false;
};

int CmdTop(Client& c, const Options& o, CommandArgs& a) {
  double interval = 1, iterations = 0;
  if (a.Number("--interval", &interval, 0.1, 3600) < 0) return kExitUsage;
  if (a.Number("--iterations", &iterations, 0, 1e9) < 0 || !a.Done())
    return kExitUsage;
  RawTerminal terminal;
  for (long n = 0; iterations == 0 || n < iterations; ++n) {
    v1::GetInfoResponse info;
    v1::ListWorkersResponse workers;
    v1::ListTasksRequest req;
    req.set_page_size(2000);
    v1::ListTasksResponse tasks;
    grpc::Status s =
        c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &info);
    if (s.ok())
      s = c.stub().ListWorkers(c.Context().get(), v1::ListWorkersRequest(),
                               &workers);
    if (s.ok()) s = c.stub().ListTasks(c.Context().get(), req, &tasks);
    if (!s.ok()) return c.Failed(s);
    std::cout << "\x1b[H\x1b[2J";  // Home and clear: plain ANSI, fine over ssh.
    RenderTop(info, workers, tasks, std::cout);
    std::cout << std::flush;
    if (terminal.WaitForQuit(static_cast<int>(interval * 1000))) break;
  }
  return kExitOk;
}

// --- several targets ---------------------------------------------------------

// One target of a command across several: its client, connected or not.
struct Reached {
  std::string target;
  Options options;  // The client refers to it.
  std::unique_ptr<Client> client;
  bool connected = false;
};

std::vector<std::unique_ptr<Reached>> ReachAll(const Options& opts) {
  std::vector<std::unique_ptr<Reached>> all;
  for (const std::string& target : opts.targets) {
    auto r = std::make_unique<Reached>();
    r->target = target;
    r->options = opts;
    r->options.target = target;
    r->options.targets = {target};
    r->client = std::make_unique<Client>(r->options);
    r->connected = r->client->Connect() == kExitOk;  // Says why on stderr.
    all.push_back(std::move(r));
  }
  return all;
}

// 0 when every target answered, 1 when none did, 4 when some did not.
int ManyExit(std::size_t failed, std::size_t total) {
  if (failed == 0) return kExitOk;
  return failed == total ? kExitFailed : kExitSomeFailed;
}

// `text` as a JSON string literal.
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      out += absl::StrFormat("\\u%04x", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// A response as one JSON line under its target.
void PrintJsonLine(const std::string& target, const google::protobuf::Message& response) {
  std::cout << "{\"target\":" << JsonString(target)
            << ",\"response\":" << ToJson(response, false) << "}\n";
}

// info, workers, loops, tasks and health across several targets: one
// table with a TARGET column (or a JSON line per target); a target that
// does not answer is said on stderr and left out.
int RunMany(const Options& opts, const std::string& cmd, CommandArgs& a) {
  TasksQuery query;
  if (cmd == "tasks" || cmd == "ps") {
    if (const int rc = ParseTasksQuery(a, &query); rc >= 0) return rc;
  } else if (!a.Done()) {
    return kExitUsage;
  }
  const bool wide = opts.format == Format::kWide;
  const bool json = opts.format == Format::kJson;
  std::optional<Table> merged;
  auto add = [&](const std::string& target, const Table& table) {
    if (!merged) merged = Table::Labeled("TARGET", table);
    merged->AddRowsOf(target, table);
  };
  std::size_t failed = 0;
  auto reached = ReachAll(opts);
  for (auto& r : reached) {
    if (!r->connected) {
      ++failed;
      continue;
    }
    Client& c = *r->client;
    grpc::Status s;
    if (cmd == "info") {
      v1::GetInfoResponse info;
      s = c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &info);
      if (s.ok() && json) PrintJsonLine(r->target, info);
      if (s.ok() && !json) {
        Table one = InfoSummaryTable();
        AddInfoSummaryRow(info, one);
        add(r->target, one);
      }
    } else if (cmd == "workers") {
      v1::ListWorkersResponse workers;
      s = c.stub().ListWorkers(c.Context().get(), v1::ListWorkersRequest(), &workers);
      if (s.ok() && json) PrintJsonLine(r->target, workers);
      if (s.ok() && !json) add(r->target, WorkersTable(workers, wide));
    } else if (cmd == "loops") {
      v1::ListLoopsResponse loops;
      s = c.stub().ListLoops(c.Context().get(), v1::ListLoopsRequest(), &loops);
      if (s.ok() && json) PrintJsonLine(r->target, loops);
      if (s.ok() && !json) add(r->target, LoopsTable(loops, wide));
    } else if (cmd == "tasks" || cmd == "ps") {
      v1::ListTasksResponse tasks;
      s = FetchTasks(c, query, &tasks);
      if (s.ok() && json) PrintJsonLine(r->target, tasks);
      if (s.ok() && !json) add(r->target, TasksTable(tasks, wide));
    } else {  // health
      auto stub = grpc::health::v1::Health::NewStub(c.channel());
      grpc::health::v1::HealthCheckResponse health;
      s = stub->Check(c.Context().get(), grpc::health::v1::HealthCheckRequest(), &health);
      if (s.ok() && json) PrintJsonLine(r->target, health);
      if (s.ok() && !json) {
        Table one({"STATUS"});
        one.AddRow({grpc::health::v1::HealthCheckResponse::ServingStatus_Name(health.status())});
        add(r->target, one);
      }
      // As with one target: only SERVING is a success.
      if (s.ok() && health.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
        ++failed;
        continue;
      }
    }
    if (!s.ok()) {
      c.Failed(s);
      ++failed;
    }
  }
  if (merged) merged->Print(std::cout);
  return ManyExit(failed, reached.size());
}

// top across several targets: a line per process, their workers in one
// table and the busiest tasks of them all, each under its TARGET.
int TopMany(const Options& opts, CommandArgs& a) {
  double interval = 1, iterations = 0;
  if (a.Number("--interval", &interval, 0.1, 3600) < 0) return kExitUsage;
  if (a.Number("--iterations", &iterations, 0, 1e9) < 0 || !a.Done()) return kExitUsage;
  auto reached = ReachAll(opts);
  RawTerminal terminal;
  std::size_t failed = 0;
  for (long n = 0; iterations == 0 || n < iterations; ++n) {
    std::optional<Table> processes, workers, tasks;
    std::vector<std::pair<std::string, v1::TaskInfo>> busiest;
    std::vector<std::string> unreachable;
    for (auto& r : reached) {
      if (!r->connected) {
        unreachable.push_back(r->target);
        continue;
      }
      Client& c = *r->client;
      v1::GetInfoResponse info;
      v1::ListWorkersResponse listed;
      v1::ListTasksRequest req;
      req.set_page_size(2000);
      v1::ListTasksResponse page;
      grpc::Status s = c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &info);
      if (s.ok()) s = c.stub().ListWorkers(c.Context().get(), v1::ListWorkersRequest(), &listed);
      if (s.ok()) s = c.stub().ListTasks(c.Context().get(), req, &page);
      if (!s.ok()) {
        unreachable.push_back(r->target + " (" + s.error_message() + ")");
        continue;
      }
      Table one = InfoSummaryTable();
      AddInfoSummaryRow(info, one);
      if (!processes) processes = Table::Labeled("TARGET", one);
      processes->AddRowsOf(r->target, one);
      Table w = WorkersTable(listed, false);
      if (!workers) workers = Table::Labeled("TARGET", w);
      workers->AddRowsOf(r->target, w);
      for (const v1::TaskInfo& t : page.tasks()) busiest.emplace_back(r->target, t);
    }
    std::sort(busiest.begin(), busiest.end(), [](const auto& x, const auto& y) {
      return x.second.busy_ns() > y.second.busy_ns();
    });
    if (busiest.size() > 15) busiest.resize(15);
    std::cout << "\x1b[H\x1b[2J";  // Home and clear, as with one target.
    std::cout << absl::StrFormat("mtctl top - %d targets - q quits\n\n", reached.size());
    if (processes) processes->Print(std::cout);
    for (const std::string& u : unreachable) {
      std::cout << "unreachable: " << Escape(u) << "\n";
    }
    if (workers) {
      std::cout << "\n";
      workers->Print(std::cout);
    }
    if (!busiest.empty()) {
      std::cout << "\nbusiest tasks:\n";
      std::optional<Table> table;
      for (const auto& [target, task] : busiest) {
        v1::ListTasksResponse one;
        *one.add_tasks() = task;
        Table t = TasksTable(one, false);
        if (!table) table = Table::Labeled("TARGET", t);
        table->AddRowsOf(target, t);
      }
      table->Print(std::cout);
    }
    std::cout << std::flush;
    failed = unreachable.size();
    if (terminal.WaitForQuit(static_cast<int>(interval * 1000))) break;
  }
  return ManyExit(failed, reached.size());
}

}  // namespace

int Run(const Options& opts) {
  const std::string& cmd = opts.args[0];
  static const char* const kCommands[] = {
      "info",  "workers",  "loops",  "tasks", "ps",
      "task",  "cancel",   "scale",  "top",   "drain",
      "watch", "shutdown", "health", "list",  "metrics", "doctor"};
  if (std::find(std::begin(kCommands), std::end(kCommands), cmd) ==
      std::end(kCommands)) {
    return UsageError("unknown command '" + cmd + "'");
  }
  CommandArgs a(opts.args, 1);
  if (cmd == "list") return a.Done() ? CmdList(opts) : kExitUsage;
  if (opts.targets.size() > 1) {
    static const char* const kAcrossTargets[] = {"info", "workers", "loops", "tasks",
                                                 "ps",   "health",  "top"};
    if (std::find(std::begin(kAcrossTargets), std::end(kAcrossTargets), cmd) ==
        std::end(kAcrossTargets)) {
      return UsageError(cmd + " works on one target at a time; give one --target");
    }
    return cmd == "top" ? TopMany(opts, a) : RunMany(opts, cmd, a);
  }
  Client c(opts);
  if (const int rc = c.Connect(); rc != kExitOk) return rc;
  if (cmd == "info") return a.Done() ? CmdInfo(c, opts) : kExitUsage;
  if (cmd == "workers") return a.Done() ? CmdWorkers(c, opts) : kExitUsage;
  if (cmd == "loops") return a.Done() ? CmdLoops(c, opts) : kExitUsage;
  if (cmd == "tasks" || cmd == "ps") return CmdTasks(c, opts, a);
  if (cmd == "task") return CmdTask(c, opts, a);
  if (cmd == "cancel") return CmdCancel(c, opts, a);
  if (cmd == "scale") return CmdScale(c, opts, a);
  if (cmd == "top") return CmdTop(c, opts, a);
  if (cmd == "watch") return CmdWatch(c, opts, a);
  if (cmd == "drain") return a.Done() ? CmdDrain(c, opts) : kExitUsage;
  if (cmd == "shutdown") return CmdShutdown(c, opts, a);
  if (cmd == "metrics") return CmdMetrics(c, opts, a);
  if (cmd == "doctor") return CmdDoctor(c, opts, a);
  return a.Done() ? CmdHealth(c, opts) : kExitUsage;
}

}  // namespace mt::control::mtctl
