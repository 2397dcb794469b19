// mtctl: the operator's command line for live mt_asyncio processes.
//
//   mtctl [--target TARGET] [-o table|wide|json] COMMAND [ARGS]
//
// See kUsage for the commands. Exit status: 0 success, 1 the call failed,
// 2 bad usage, 3 not found (no such task, no such process).

#include <dirent.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "control/src/table.h"
#include "control/src/unix_connect.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mt/control/v1/control.grpc.pb.h"

namespace mt::control {
namespace {

constexpr char kUsage[] = R"(usage: mtctl [OPTIONS] COMMAND [ARGS]

Inspect and steer live mt_asyncio processes over their control plane.

options:
  --target TARGET     the process: unix:///PATH, a PID (its socket in the
                      default folder), or HOST:PORT (TLS); default
                      $MTCTL_TARGET, else the only process of this user
  --timeout SECONDS   deadline of each call (default 5)
  --connect-timeout SECONDS
                      wait up to this long for the target to start
                      serving (its socket to appear, a connection to be
                      accepted); default 0: fail at once if it is not there
  -o, --output FMT    table (default), wide (more columns) or json
  --json              same as -o json
  --tls-ca FILE       CA certificate for a HOST:PORT target
  --tls-cert FILE     client certificate (a server with a client CA asks
  --tls-key FILE        for one), and its key
  --tls-server-name N the name the server's certificate must carry, when
                      it is not the target's host
  --token-file FILE   bearer token for a HOST:PORT target (the admin or the
                      read-only one; default $MTCTL_TOKEN_FILE)
  -h, --help          show this help and exit

commands:
  info                         process, interpreter and runtime
  workers                      every worker, the injector, the blocking pool
  loops                        every live event loop
  tasks|ps [--loop ID] [--state running|ready|waiting] [--name TEXT]
           [--limit N | --all] pending tasks (default limit 500)
  task ID                      one task: its stack and await graph
  cancel ID [--msg TEXT]       cancel a task
  scale workers N [--wait SECONDS]
                               resize the worker pool (and wait for it)
  scale blocking N [--idle-ttl SECONDS]
                               cap the blocking pool (N 0: keep the cap)
  watch [--interval SECONDS] [--loops] [--count N]
                               a line of runtime figures per interval (the
                               Watch stream; -o json: one object a line)
  top [--interval SECONDS] [--iterations N]
                               live view of workers and busiest tasks (q quits)
  drain                        take the process out of rotation (health
                               NOT_SERVING); nothing stops
  shutdown [--grace SECONDS] [--quick] [--wait]
                               coordinated shutdown; --wait prints the
                               phases until the runtime stopped
  health                       grpc.health.v1 status of the process
  list                         this user's mt_asyncio processes on the machine

exit status: 0 success, 1 the call failed, 2 bad usage, 3 not found.
)";

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 3;

enum class Format { kTable, kWide, kJson };

struct Options {
  std::string target;
  double timeout_seconds = 5;
  double connect_timeout_seconds = 0;
  Format format = Format::kTable;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string token_file;
  std::vector<std::string> args;  // The command and its arguments.
};

int UsageError(const std::string& message) {
  std::cerr << "mtctl: " << message << "\ntry 'mtctl --help'\n";
  return kExitUsage;
}

// --- where processes serve --------------------------------------------------

// The folder mt_asyncio.control.serve() uses by default (keep in step with
// mt_asyncio/control.py).
std::string DefaultSocketDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/mt_asyncio";
  return absl::StrFormat("/tmp/mt_asyncio-%d", static_cast<int>(geteuid()));
}

// Whether the process a socket is named after still exists (a process
// killed without closing its control plane leaves its socket behind).
bool OwnerAlive(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  const std::string pid = base.substr(0, base.size() - 5);
  int n = 0;
  if (!absl::SimpleAtoi(pid, &n) || n <= 0) return true;  // Not ours to judge.
  return kill(n, 0) == 0 || errno == EPERM;
}

std::vector<std::string> SocketsInDefaultDir() {
  std::vector<std::string> out;
  const std::string dir = DefaultSocketDir();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".sock") {
      out.push_back(dir + "/" + name);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// --- the connection ---------------------------------------------------------------

class Client {
 public:
  explicit Client(const Options& opts) : opts_(opts) {}

  // Resolves the target and connects; an exit code on failure, said on
  // stderr when `report`.
  int Connect(bool report = true) {
    // One deadline for the whole wait: the socket appearing, then the
    // connection being accepted.
    const auto connect_deadline =
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(static_cast<long long>(opts_.connect_timeout_seconds * 1000));
    std::string target = opts_.target;
    if (target.empty()) {
      std::vector<std::string> sockets = SocketsInDefaultDir();
      sockets.erase(std::remove_if(sockets.begin(), sockets.end(),
                                   [](const std::string& p) { return !OwnerAlive(p); }),
                    sockets.end());
      if (sockets.size() != 1) {
        std::cerr << "mtctl: no target: pass --target or set MTCTL_TARGET ("
                  << sockets.size() << " live sockets in " << DefaultSocketDir()
                  << "; 'mtctl list' shows them)\n";
        return kExitUsage;
      }
      target = "unix://" + sockets[0];
    } else if (AllDigits(target)) {
      target = "unix://" + DefaultSocketDir() + "/" + target + ".sock";
    }
    std::string token_file = opts_.token_file;
    if (token_file.empty()) {
      if (const char* env = std::getenv("MTCTL_TOKEN_FILE")) token_file = env;
    }
    grpc::ChannelArguments args;
    if (target.rfind("unix:", 0) == 0) {
      if (!opts_.tls_ca.empty() || !opts_.tls_cert.empty() || !opts_.tls_key.empty() ||
          !opts_.tls_server_name.empty() || !opts_.token_file.empty()) {
        return UsageError("the --tls-* options and --token-file are for HOST:PORT targets");
      }
      const std::string path = target.substr(target.rfind("unix://", 0) == 0 ? 7 : 5);
      // A process that is starting has no socket yet: with a connect
      // timeout, wait for it rather than report it missing. Nothing is
      // sent before the kernel says who serves the socket.
      absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path, connect_deadline);
      if (!fd.ok()) {
        foreign_ = absl::IsPermissionDenied(fd.status());
        if (report) std::cerr << "mtctl: " << Escape(std::string(fd.status().message())) << "\n";
        return absl::IsNotFound(fd.status()) ? kExitNotFound : kExitFailed;
      }
      // Connected already: the channel has nothing left to wait for.
      channel_ = grpc::CreateCustomInsecureChannelFromFd(target, *fd, args);
    } else {
      // The control plane serves TCP only over TLS, with a token.
      if (opts_.tls_ca.empty()) return UsageError("a HOST:PORT target needs --tls-ca");
      if (opts_.tls_cert.empty() != opts_.tls_key.empty()) {
        return UsageError("--tls-cert and --tls-key go together");
      }
      if (token_file.empty()) {
        return UsageError("a HOST:PORT target needs --token-file (or $MTCTL_TOKEN_FILE)");
      }
      grpc::SslCredentialsOptions ssl;
      if (!ReadFile(opts_.tls_ca, &ssl.pem_root_certs)) return kExitUsage;
      if (!opts_.tls_cert.empty() && (!ReadFile(opts_.tls_cert, &ssl.pem_cert_chain) ||
                                      !ReadFile(opts_.tls_key, &ssl.pem_private_key))) {
        return kExitUsage;
      }
      std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
      if (!opts_.tls_server_name.empty()) {
        args.SetSslTargetNameOverride(opts_.tls_server_name);
      }
      std::string token;
      if (!ReadFile(token_file, &token)) return kExitUsage;
      token_ = std::string(absl::StripAsciiWhitespace(token));
      if (token_.empty()) return UsageError("the token file " + token_file + " is empty");
      channel_ = grpc::CreateCustomChannel(target, creds, args);
      if (opts_.connect_timeout_seconds > 0 && !channel_->WaitForConnected(connect_deadline)) {
        std::cerr << "mtctl: " << target << " accepted no connection within "
                  << opts_.connect_timeout_seconds << " s\n";
        return kExitFailed;
      }
    }
    target_ = target;
    stub_ = v1::RuntimeControl::NewStub(channel_);
    return kExitOk;
  }

  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) const {
    auto context = std::make_unique<grpc::ClientContext>();
    if (deadline) {
      context->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(
                                static_cast<long long>(opts_.timeout_seconds * 1000)));
    }
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
    return context;
  }

  v1::RuntimeControl::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& target() const { return target_; }
  // Whether Connect() refused a socket served by another user.
  bool foreign() const { return foreign_; }

  // Prints a failed call and returns its exit code.
  int Failed(const grpc::Status& status) const {
    // The message may quote what the process holds (a task name): escaped.
    std::cerr << absl::StrFormat("mtctl: %s: %s (%s)\n", target_,
                                 Escape(status.error_message()), CodeName(status.error_code()));
    return status.error_code() == grpc::StatusCode::NOT_FOUND ? kExitNotFound : kExitFailed;
  }

 private:
  static bool ReadFile(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "mtctl: cannot read " << path << "\n";
      return false;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    *out = buf.str();
    return true;
  }

  static const char* CodeName(grpc::StatusCode code) {
    switch (code) {
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
      case grpc::StatusCode::NOT_FOUND:
        return "NOT_FOUND";
      case grpc::StatusCode::FAILED_PRECONDITION:
        return "FAILED_PRECONDITION";
      case grpc::StatusCode::UNAVAILABLE:
        return "UNAVAILABLE";
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
      case grpc::StatusCode::UNAUTHENTICATED:
        return "UNAUTHENTICATED";
      case grpc::StatusCode::PERMISSION_DENIED:
        return "PERMISSION_DENIED";
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return "RESOURCE_EXHAUSTED";
      case grpc::StatusCode::UNIMPLEMENTED:
        return "UNIMPLEMENTED";
      default:
        return "gRPC error";
    }
  }

  const Options& opts_;
  std::string target_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RuntimeControl::Stub> stub_;
  bool foreign_ = false;
};

// --- rendering -------------------------------------------------------------------

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

void PrintJson(const google::protobuf::Message& message) { std::cout << ToJson(message, true); }

std::string Lower(std::string name, std::string_view prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string StateName(v1::RuntimeState s) { return Lower(v1::RuntimeState_Name(s), "RUNTIME_STATE_"); }
std::string StateName(v1::WorkerState s) { return Lower(v1::WorkerState_Name(s), "WORKER_STATE_"); }
std::string StateName(v1::LoopState s) { return Lower(v1::LoopState_Name(s), "LOOP_STATE_"); }
std::string StateName(v1::TaskState s) { return Lower(v1::TaskState_Name(s), "TASK_STATE_"); }

std::string Num(unsigned long long n) { return absl::StrFormat("%d", n); }

void PrintInfo(const v1::GetInfoResponse& info) {
  const v1::InterpreterInfo& py = info.interpreter();
  const v1::RuntimeInfo& rt = info.runtime();
  const v1::RuntimeConfig& cfg = rt.config();
  absl::PrintF("process      pid %d, mt_asyncio %s\n", info.pid(),
               Escape(info.mt_asyncio_version()));
  absl::PrintF("interpreter  %s %s (%s, GIL %s) %s\n", Escape(py.implementation()),
               Escape(py.version()), py.free_threaded() ? "free-threaded" : "GIL build",
               py.gil_enabled() ? "enabled" : "disabled", Escape(py.executable()));
  absl::PrintF("runtime      %s, uptime %s, reactor on %s\n", StateName(rt.state()),
               Duration(rt.uptime_seconds()), cfg.reactor_mode());
  absl::PrintF("workers      %d target, %d live (at most %d), %d searching, %d parked\n",
               cfg.worker_threads(), rt.live_workers(), cfg.max_workers(),
               rt.searching_workers(), rt.parked_workers());
  absl::PrintF("work         %d units in flight, %d injected, %d timers, %d fds\n",
               rt.tasks_in_flight(), rt.injector_depth(), rt.timers_pending(),
               rt.fds_registered());
  absl::PrintF("blocking     %d/%d threads (%d idle, %d running), %d queued, idle ttl %s\n",
               rt.blocking().threads(), cfg.blocking_threads_max(), rt.blocking().idle(),
               rt.blocking().running(), rt.blocking().queued(),
               Duration(cfg.blocking_idle_ttl_seconds()));
  absl::PrintF("stalls       %d (threshold %s); shutdown grace %s\n", rt.stalls_detected(),
               Duration(cfg.stall_threshold_seconds()), Duration(cfg.shutdown_grace_seconds()));
  absl::PrintF("control      %s, %d watchers, %d connections refused, %d calls rejected\n",
               info.control().draining() ? "draining" : "serving", info.control().watchers(),
               info.control().refused_connections(), info.control().rejected_calls());
  if (info.control().calls_over_limit() > 0 || info.control().cancelled_writes() > 0) {
    absl::PrintF("limits       %d calls over a cap, %d cancelled for not reading their answer\n",
                 info.control().calls_over_limit(), info.control().cancelled_writes());
  }
  if (info.control().inspection_throttled_seconds() > 0 ||
      info.control().inspections_refused() > 0) {
    absl::PrintF("inspection   held back %s over its CPU share, %d read-only calls refused\n",
                 Duration(info.control().inspection_throttled_seconds()),
                 info.control().inspections_refused());
  }
  // The peers refused most, one line each (-o json has them all).
  const auto& refusals = info.control().refusals();
  for (int i = 0; i < refusals.size() && i < 5; ++i) {
    const v1::PeerRefusals& p = refusals[i];
    std::string what;
    if (p.refused_connections() > 0) what += absl::StrFormat(", %d connections", p.refused_connections());
    if (p.unauthenticated_calls() > 0) {
      what += absl::StrFormat(", %d unauthenticated", p.unauthenticated_calls());
    }
    if (p.permission_denied_calls() > 0) {
      what += absl::StrFormat(", %d denied", p.permission_denied_calls());
    }
    absl::PrintF("refused      %s%s%s; last %s ago: %s\n", Escape(p.peer()),
                 p.client_subject().empty() ? "" : " (" + Escape(p.client_subject()) + ")", what,
                 Duration(p.last_seconds_ago()), Escape(p.last_reason()));
  }
  if (refusals.size() > 5) absl::PrintF("refused      and %d more peers\n", refusals.size() - 5);
}

void PrintWorkers(const v1::ListWorkersResponse& r, bool wide) {
  std::vector<std::string> header = {"IDX", "TID", "STATE", "UNITS", "BUSY", "STEALS",
                                     "PARKS", "QUEUE", "LIFO"};
  std::vector<bool> right = {true, true, false, true, true, true, true, true, false};
  if (wide) {
    for (const char* h : {"STOLEN_UNITS", "STOLEN_FROM", "REACTOR_POLLS", "OVERFLOWS"}) {
      header.push_back(h);
      right.push_back(true);
    }
  }
  header.push_back("RUNNING");
  right.push_back(false);
  Table table(header, right);
  for (const v1::WorkerInfo& w : r.workers()) {
    if (!w.active() && !wide) continue;
    std::vector<std::string> row = {
        Num(w.index()), Num(w.os_thread_id()), StateName(w.state()), Count(w.units_run()),
        Duration(w.busy_ns() / 1e9), Count(w.steals()), Count(w.parks()),
        Num(w.local_queue_depth()), w.lifo_occupied() ? "yes" : "-"};
    if (wide) {
      for (auto v : {w.stolen_units(), w.stolen_from(), w.reactor_polls(), w.overflows()}) {
        row.push_back(Count(v));
      }
    }
    std::string running = "-";
    if (w.current_task_id() != 0) {
      running = absl::StrFormat("%d", w.current_task_id());
      if (!w.current_task_name().empty()) running += " " + Clip(w.current_task_name(), 32);
      if (w.current_task_running_ns() > 0) {
        running += " for " + Duration(w.current_task_running_ns() / 1e9);
      }
      if (w.stalled()) running += " STALLED";
    }
    row.push_back(running);
    table.AddRow(std::move(row));
  }
  table.Print(std::cout);
  const v1::BlockingPoolInfo& b = r.blocking();
  absl::PrintF("\nworkers: %d target, %d live; injector: %d queued\n", r.target_workers(),
               r.live_workers(), r.injector_depth());
  absl::PrintF("blocking: %d/%d threads, %d idle, %d running, %d queued, idle ttl %s, "
               "%d completed\n",
               b.threads(), b.max_threads(), b.idle(), b.running(), b.queued(),
               Duration(b.idle_ttl_seconds()), b.completed());
}

void PrintLoops(const v1::ListLoopsResponse& r, bool wide) {
  std::vector<std::string> header = {"ID", "STATE", "TASKS", "RUNNING", "READY", "WAITING",
                                     "CREATED", "DEFERRED", "SLOW", "DEBUG", "THREAD"};
  std::vector<bool> right = {true, false, true, true, true, true, true, true, true, false, true};
  if (wide) {
    header.push_back("TYPE");
    right.push_back(false);
  }
  Table table(header, right);
  for (const v1::LoopInfo& l : r.loops()) {
    std::vector<std::string> row = {
        Num(l.id()), StateName(l.state()), Count(l.tasks().pending()),
        Count(l.tasks().running()), Count(l.tasks().ready()), Count(l.tasks().waiting()),
        Count(l.tasks_created()), Count(l.deferred_callbacks()), Count(l.slow_steps()),
        l.debug() ? "on" : "off", l.thread_id() ? Num(l.thread_id()) : "-"};
    if (wide) row.push_back(l.type());
    table.AddRow(std::move(row));
  }
  table.Print(std::cout);
}

void AddTaskRow(Table& table, const v1::TaskInfo& t, bool wide) {
  std::vector<std::string> row = {
      Num(t.id()), Num(t.loop_id()), StateName(t.state()), Clip(t.name(), 24),
      Clip(t.coroutine(), 28), Duration(t.age_seconds()), Count(t.steps()),
      Duration(t.busy_ns() / 1e9), t.last_worker() >= 0 ? Num(t.last_worker()) : "-"};
  if (wide) {
    row.push_back(t.location());
    row.push_back(t.awaiting());
  } else {
    row.push_back(Clip(t.awaiting(), 40));
  }
  table.AddRow(std::move(row));
}

Table TaskTable(bool wide) {
  std::vector<std::string> header = {"ID", "LOOP", "STATE", "NAME", "COROUTINE", "AGE",
                                     "STEPS", "BUSY", "WORKER"};
  std::vector<bool> right = {true, true, false, false, false, true, true, true, true};
  if (wide) {
    header.push_back("SUSPENDED AT");
    right.push_back(false);
  }
  header.push_back("AWAITING");
  right.push_back(false);
  return Table(header, right);
}

// --- commands ---------------------------------------------------------------------

// Parses "--flag VALUE" pairs and bare flags after a command. Returns
// false (after printing why) on a bad or unknown argument.
class CommandArgs {
 public:
  CommandArgs(const std::vector<std::string>& args, std::size_t first) {
    for (std::size_t i = first; i < args.size(); ++i) rest_.push_back(args[i]);
  }
  // A positional argument (in order).
  bool Positional(std::string* out) {
    for (auto it = rest_.begin(); it != rest_.end(); ++it) {
      if (it->rfind("--", 0) == 0) {
        ++it;  // Skip its value, if any, conservatively below.
        if (it == rest_.end()) break;
        continue;
      }
      *out = *it;
      rest_.erase(it);
      return true;
    }
    return false;
  }
  bool Flag(const std::string& name) {
    auto it = std::find(rest_.begin(), rest_.end(), name);
    if (it == rest_.end()) return false;
    rest_.erase(it);
    return true;
  }
  // Returns 1 found, 0 absent, -1 error (printed).
  int Value(const std::string& name, std::string* out) {
    for (auto it = rest_.begin(); it != rest_.end(); ++it) {
      if (*it == name) {
        if (it + 1 == rest_.end()) {
          UsageError(name + " needs a value");
          return -1;
        }
        *out = *(it + 1);
        rest_.erase(it, it + 2);
        return 1;
      }
      if (it->rfind(name + "=", 0) == 0) {
        *out = it->substr(name.size() + 1);
        rest_.erase(it);
        return 1;
      }
    }
    return 0;
  }
  int Number(const std::string& name, double* out, double lo, double hi) {
    std::string text;
    const int found = Value(name, &text);
    if (found <= 0) return found;
    if (!absl::SimpleAtod(text, out) || !(*out >= lo && *out <= hi)) {
      UsageError(absl::StrFormat("%s must be a number in [%g, %g], got '%s'", name, lo, hi, text));
      return -1;
    }
    return 1;
  }
  // Call last: complains about anything not consumed.
  bool Done() const {
    if (rest_.empty()) return true;
    UsageError("unexpected argument '" + rest_.front() + "'");
    return false;
  }

 private:
  std::vector<std::string> rest_;
};

bool ParseId(const std::string& text, std::uint64_t* id) {
  if (!absl::SimpleAtoi(text, id) || *id == 0) {
    UsageError("'" + text + "' is not a task id (mtctl tasks shows them)");
    return false;
  }
  return true;
}

// One unary call with an empty request: its response as JSON, or drawn by
// `render` (told whether -o wide was asked).
template <typename Request, typename Response, typename Render>
int ShowUnary(Client& c, const Options& o,
              grpc::Status (v1::RuntimeControl::Stub::*method)(grpc::ClientContext*,
                                                               const Request&, Response*),
              Render render) {
  Response r;
  grpc::Status s = (c.stub().*method)(c.Context().get(), Request(), &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    PrintJson(r);
  } else {
    render(r, o.format == Format::kWide);
  }
  return kExitOk;
}

int CmdInfo(Client& c, const Options& o) {
  return ShowUnary(c, o, &v1::RuntimeControl::Stub::GetInfo,
                   [](const v1::GetInfoResponse& r, bool) { PrintInfo(r); });
}

int CmdWorkers(Client& c, const Options& o) {
  return ShowUnary(c, o, &v1::RuntimeControl::Stub::ListWorkers, PrintWorkers);
}

int CmdLoops(Client& c, const Options& o) {
  return ShowUnary(c, o, &v1::RuntimeControl::Stub::ListLoops, PrintLoops);
}

int CmdTasks(Client& c, const Options& o, CommandArgs& a) {
  v1::ListTasksRequest req;
  double loop = 0, limit = 500;
  std::string state, name;
  if (a.Number("--loop", &loop, 0, 1e18) < 0) return kExitUsage;
  if (a.Number("--limit", &limit, 1, 1e9) < 0) return kExitUsage;
  if (a.Value("--state", &state) < 0 || a.Value("--name", &name) < 0) return kExitUsage;
  const bool all = a.Flag("--all");
  if (!a.Done()) return kExitUsage;
  req.set_loop_id(static_cast<std::uint64_t>(loop));
  if (!state.empty()) {
    v1::TaskState s;
    std::string upper = "TASK_STATE_";
    for (char ch : state) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (!v1::TaskState_Parse(upper, &s) || s == v1::TASK_STATE_UNSPECIFIED) {
      return UsageError("--state must be running, ready or waiting");
    }
    req.set_state(s);
  }
  req.set_name_contains(name);
  v1::ListTasksResponse out;
  while (true) {
    req.set_page_size(all ? 2000 : static_cast<std::uint32_t>(
                                       std::min<double>(2000, limit - out.tasks_size())));
    v1::ListTasksResponse page;
    grpc::Status s = c.stub().ListTasks(c.Context().get(), req, &page);
    if (!s.ok()) return c.Failed(s);
    out.set_total_matching(page.total_matching());
    for (auto& t : *page.mutable_tasks()) *out.add_tasks() = std::move(t);
    if (page.next_page_token().empty() || (!all && out.tasks_size() >= limit)) {
      out.set_next_page_token(page.next_page_token());
      break;
    }
    req.set_page_token(page.next_page_token());
  }
  if (o.format == Format::kJson) {
    PrintJson(out);
    return kExitOk;
  }
  Table table = TaskTable(o.format == Format::kWide);
  for (const v1::TaskInfo& t : out.tasks()) AddTaskRow(table, t, o.format == Format::kWide);
  table.Print(std::cout);
  if (static_cast<std::uint64_t>(out.tasks_size()) < out.total_matching()) {
    absl::PrintF("\n%d of %d tasks shown (--limit N or --all for more)\n", out.tasks_size(),
                 out.total_matching());
  }
  return kExitOk;
}

int CmdTask(Client& c, const Options& o, CommandArgs& a) {
  std::string id_text;
  if (!a.Positional(&id_text)) return UsageError("task needs a task id");
  double frames = 0;
  if (a.Number("--frames", &frames, 0, 1000) < 0 || !a.Done()) return kExitUsage;
  v1::GetTaskRequest req;
  std::uint64_t id;
  if (!ParseId(id_text, &id)) return kExitUsage;
  req.set_id(id);
  req.set_max_frames(static_cast<std::uint32_t>(frames));
  v1::GetTaskResponse r;
  grpc::Status s = c.stub().GetTask(c.Context().get(), req, &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    PrintJson(r);
    return kExitOk;
  }
  const v1::TaskInfo& t = r.task();
  absl::PrintF("task %d %s on loop %d: %s, coroutine %s\n", t.id(), Escape(t.name()),
               t.loop_id(), StateName(t.state()), Escape(t.coroutine()));
  absl::PrintF("age %s, %d steps, busy %s, last on worker %d, cancelling %d\n",
               Duration(t.age_seconds()), t.steps(), Duration(t.busy_ns() / 1e9),
               t.last_worker(), t.cancelling());
  if (!t.awaiting().empty()) absl::PrintF("awaiting %s\n", Escape(t.awaiting()));
  if (r.awaited_by_size() > 0) {
    std::string ids;
    for (auto w : r.awaited_by()) ids += (ids.empty() ? "" : ", ") + Num(w);
    absl::PrintF("awaited by tasks %s\n", ids);
  }
  absl::PrintF("\nstack (innermost last):\n");
  if (r.stack_size() == 0) absl::PrintF("  (none: the task is running or has no frames)\n");
  for (const v1::FrameInfo& f : r.stack()) {
    absl::PrintF("  File \"%s\", line %d, in %s\n", Escape(f.file()), f.line(),
                 Escape(f.function()));
  }
  // The graph is lines of text from the process: each is escaped, the
  // line breaks between them kept.
  std::vector<std::string> graph;
  for (absl::string_view line : absl::StrSplit(r.call_graph(), '\n')) {
    graph.push_back(Escape({line.data(), line.size()}));
  }
  absl::PrintF("\nawait graph:\n%s\n", absl::StrJoin(graph, "\n"));
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
    PrintJson(r);
  } else if (r.cancelled()) {
    absl::PrintF("task %d: cancel requested\n", id);
  } else {
    absl::PrintF("task %d: not cancelled (it is finishing)\n", id);
  }
  return kExitOk;
}

int CmdScale(Client& c, const Options& o, CommandArgs& a) {
  std::string what, count_text;
  if (!a.Positional(&what) || !a.Positional(&count_text)) {
    return UsageError("usage: scale workers N [--wait S] | scale blocking N [--idle-ttl S]");
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
      PrintJson(r);
    } else {
      absl::PrintF("workers: %d -> %d (%d live%s)\n", r.previous(), r.target(), r.live_workers(),
                   r.converged() ? "" : ", converging");
    }
    return kExitOk;
  }
  if (what == "blocking") {
    double ttl = 0;
    if (a.Number("--idle-ttl", &ttl, 0, 86400) < 0 || !a.Done()) return kExitUsage;
    v1::SetBlockingPoolRequest req;
    req.set_max_threads(static_cast<std::uint32_t>(count));
    req.set_idle_ttl_seconds(ttl);
    v1::SetBlockingPoolResponse r;
    grpc::Status s = c.stub().SetBlockingPool(c.Context().get(), req, &r);
    if (!s.ok()) return c.Failed(s);
    if (o.format == Format::kJson) {
      PrintJson(r);
    } else {
      absl::PrintF("blocking max threads: %d -> %d; idle ttl: %s -> %s\n",
                   r.previous_max_threads(), r.max_threads(),
                   Duration(r.previous_idle_ttl_seconds()), Duration(r.idle_ttl_seconds()));
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
    PrintJson(r);
  } else {
    absl::PrintF("draining%s: health is NOT_SERVING; work goes on until shutdown\n",
                 r.already_draining() ? " (already)" : "");
  }
  return kExitOk;
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
                          std::chrono::milliseconds(static_cast<long long>(o.timeout_seconds * 1000)));
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
      absl::PrintF("%7.2f s  %-10s  %d units in flight, %d blocking jobs running%s\n",
                   p.elapsed_seconds(), StateName(p.state()), p.tasks_in_flight(),
                   p.blocking_running(), p.joined() ? "  (joined a shutdown under way)" : "");
      std::fflush(stdout);
    }
    if (!wait) {
      context->TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (!wait) {
    return any || s.ok() || s.error_code() == grpc::StatusCode::CANCELLED ? kExitOk
                                                                           : c.Failed(s);
  }
  if (s.ok()) return kExitOk;
  // The process may exit as soon as its runtime stopped: a stream cut
  // after the shutdown started is the end we waited for.
  if (any && s.error_code() == grpc::StatusCode::UNAVAILABLE &&
      last != v1::RUNTIME_STATE_RUNNING) {
    if (o.format != Format::kJson) absl::PrintF("process gone (exited)\n");
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
  std::uint64_t last_units = 0;
  while (reader->Read(&u)) {
    ++seen;
    if (o.format == Format::kJson) {
      std::cout << ToJson(u, false) << "\n" << std::flush;
    } else {
      std::uint64_t units = 0, busy = 0;
      for (const v1::WorkerInfo& w : u.runtime().workers()) {
        units += w.units_run();
        if (w.state() == v1::WORKER_STATE_RUNNING) ++busy;
      }
      std::uint64_t tasks = 0;
      for (const v1::LoopInfo& l : u.loops()) tasks += l.tasks().pending();
      absl::PrintF("#%d %s  workers %d (%d running)  units +%d  injected %d  blocking %d/%d%s%s\n",
                   u.sequence(), StateName(u.runtime().state()), u.runtime().live_workers(), busy,
                   seen == 1 ? 0 : units - last_units, u.runtime().injector_depth(),
                   u.runtime().blocking().running(), u.runtime().blocking().max_threads(),
                   loops ? absl::StrFormat("  tasks %d", tasks) : "",
                   u.skipped() ? absl::StrFormat("  (%d skipped)", u.skipped()) : "");
      std::fflush(stdout);
      last_units = units;
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
  grpc::Status s = stub->Check(c.Context().get(), grpc::health::v1::HealthCheckRequest(), &r);
  if (!s.ok()) return c.Failed(s);
  if (o.format == Format::kJson) {
    PrintJson(r);
  } else {
    absl::PrintF("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(r.status()));
  }
  return r.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitFailed;
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
    grpc::Status s = c.Connect(/*report=*/false) == kExitOk
                         ? c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &r)
                         : grpc::Status(grpc::StatusCode::UNAVAILABLE, "no socket");
    const std::string base = path.substr(path.rfind('/') + 1);
    const std::string pid = base.substr(0, base.size() - 5);
    if (!s.ok()) {
      const char* state = c.foreign() ? "foreign" : OwnerAlive(path) ? "unreachable" : "stale";
      table.AddRow({pid, state, "-", "-", "-", path});
      continue;
    }
    table.AddRow({Num(r.pid()), StateName(r.runtime().state()),
                  Num(r.runtime().live_workers()), r.mt_asyncio_version(),
                  r.interpreter().version() + (r.interpreter().free_threaded() ? "t" : ""),
                  path});
    if (o.format == Format::kJson) {
      json += (json.size() > 1 ? "," : "") + std::string("{\"socket\":\"") + path +
              "\",\"info\":" + ToJson(r, false) + "}";
    }
  }
  if (o.format == Format::kJson) {
    std::cout << json << "]\n";
  } else if (table.empty()) {
    absl::PrintF("no mt_asyncio control sockets in %s\n", DefaultSocketDir());
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
  if (a.Number("--iterations", &iterations, 0, 1e9) < 0 || !a.Done()) return kExitUsage;
  RawTerminal terminal;
  for (long n = 0; iterations == 0 || n < iterations; ++n) {
    v1::GetInfoResponse info;
    v1::ListWorkersResponse workers;
    v1::ListTasksRequest req;
    req.set_page_size(2000);
    v1::ListTasksResponse tasks;
    grpc::Status s = c.stub().GetInfo(c.Context().get(), v1::GetInfoRequest(), &info);
    if (s.ok()) s = c.stub().ListWorkers(c.Context().get(), v1::ListWorkersRequest(), &workers);
    if (s.ok()) s = c.stub().ListTasks(c.Context().get(), req, &tasks);
    if (!s.ok()) return c.Failed(s);
    std::cout << "\x1b[H\x1b[2J";  // Home and clear: plain ANSI, fine over ssh.
    absl::PrintF("mtctl top - pid %d - %s - %s - %d tasks - q quits\n\n", info.pid(),
                 StateName(info.runtime().state()), Duration(info.runtime().uptime_seconds()),
                 tasks.total_matching());
    PrintWorkers(workers, false);
    std::vector<v1::TaskInfo> busiest(tasks.tasks().begin(), tasks.tasks().end());
    std::sort(busiest.begin(), busiest.end(),
              [](const v1::TaskInfo& x, const v1::TaskInfo& y) { return x.busy_ns() > y.busy_ns(); });
    if (busiest.size() > 15) busiest.resize(15);
    absl::PrintF("\nbusiest tasks:\n");
    Table table = TaskTable(false);
    for (const v1::TaskInfo& t : busiest) AddTaskRow(table, t, false);
    table.Print(std::cout);
    std::cout << std::flush;
    if (terminal.WaitForQuit(static_cast<int>(interval * 1000))) break;
  }
  return kExitOk;
}

// --- main ---------------------------------------------------------------------------

// Returns -1 to go on, else the exit code.
int ParseGlobal(int argc, char** argv, Options* opts) {
  if (const char* env = std::getenv("MTCTL_TARGET")) opts->target = env;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::size_t i = 0;
  auto value = [&](const std::string& arg, const std::string& name, std::string* out) {
    if (arg == name) {
      if (i + 1 >= args.size()) return -1;
      *out = args[++i];
      return 1;
    }
    if (arg.rfind(name + "=", 0) == 0) {
      *out = arg.substr(name.size() + 1);
      return 1;
    }
    return 0;
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string v;
    int r;
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return kExitOk;
    }
    if (arg == "--json") {
      opts->format = Format::kJson;
    } else if ((r = value(arg, "--target", &opts->target)) != 0) {
      if (r < 0) return UsageError("--target needs a value");
    } else if ((r = value(arg, "--tls-ca", &opts->tls_ca)) != 0) {
      if (r < 0) return UsageError("--tls-ca needs a value");
    } else if ((r = value(arg, "--tls-cert", &opts->tls_cert)) != 0) {
      if (r < 0) return UsageError("--tls-cert needs a value");
    } else if ((r = value(arg, "--tls-key", &opts->tls_key)) != 0) {
      if (r < 0) return UsageError("--tls-key needs a value");
    } else if ((r = value(arg, "--tls-server-name", &opts->tls_server_name)) != 0) {
      if (r < 0) return UsageError("--tls-server-name needs a value");
    } else if ((r = value(arg, "--token-file", &opts->token_file)) != 0) {
      if (r < 0) return UsageError("--token-file needs a value");
    } else if ((r = value(arg, "--connect-timeout", &v)) != 0) {
      if (r < 0 || !absl::SimpleAtod(v, &opts->connect_timeout_seconds) ||
          !(opts->connect_timeout_seconds >= 0 && opts->connect_timeout_seconds <= 3600)) {
        return UsageError("bad --connect-timeout '" + v + "'");
      }
    } else if ((r = value(arg, "--timeout", &v)) != 0) {
      if (r < 0 || !absl::SimpleAtod(v, &opts->timeout_seconds) ||
          !(opts->timeout_seconds > 0 && opts->timeout_seconds <= 3600)) {
        return UsageError("bad --timeout '" + v + "'");
      }
    } else if ((r = value(arg, "-o", &v)) != 0 || (r = value(arg, "--output", &v)) != 0) {
      if (r < 0) return UsageError("-o needs table, wide or json");
      if (v == "table") {
        opts->format = Format::kTable;
      } else if (v == "wide") {
        opts->format = Format::kWide;
      } else if (v == "json") {
        opts->format = Format::kJson;
      } else {
        return UsageError("-o must be table, wide or json, got '" + v + "'");
      }
    } else if (!arg.empty() && arg[0] == '-' && opts->args.empty()) {
      return UsageError("unknown option '" + arg + "'");
    } else {
      opts->args.push_back(arg);
    }
  }
  if (opts->args.empty()) return UsageError("no command given");
  return -1;
}

int Run(const Options& opts) {
  const std::string& cmd = opts.args[0];
  static const char* const kCommands[] = {"info",  "workers", "loops",    "tasks",  "ps",
                                          "task",  "cancel",  "scale",    "top",    "drain",
                                          "watch",
                                          "shutdown", "health", "list"};
  if (std::find(std::begin(kCommands), std::end(kCommands), cmd) == std::end(kCommands)) {
    return UsageError("unknown command '" + cmd + "'");
  }
  CommandArgs a(opts.args, 1);
  if (cmd == "list") return a.Done() ? CmdList(opts) : kExitUsage;
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
  return a.Done() ? CmdHealth(c, opts) : kExitUsage;
}

}  // namespace
}  // namespace mt::control

int main(int argc, char** argv) {
  mt::control::Options opts;
  const int parsed = mt::control::ParseGlobal(argc, argv, &opts);
  if (parsed >= 0) return parsed;
  return mt::control::Run(opts);
}
