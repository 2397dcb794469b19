// mtctl: the operator's command line for a live mt_asyncio process.
//
//   mtctl --target unix:///run/app/mt.sock info [--json]

#include <grpcpp/grpcpp.h>
#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "mt/control/v1/control.grpc.pb.h"

namespace mt::control {
namespace {

constexpr char kUsage[] = R"(usage: mtctl [--target TARGET] [--timeout SECONDS] COMMAND [--json]

Inspect and steer a live mt_asyncio process over its control socket.

options:
  --target TARGET     where the process serves mt.control.v1, e.g.
                      unix:///run/app/mt.sock (default: $MTCTL_TARGET)
  --timeout SECONDS   deadline for each call (default: 5)
  --json              print the raw response as JSON
  -h, --help          show this help and exit

commands:
  info                interpreter, runtime configuration, state and workers

exit status: 0 on success, 2 on bad usage, 1 when the call fails.
)";

struct Options {
  std::string target;
  double timeout_seconds = 5;
  bool json = false;
  std::string command;
};

int UsageError(const std::string& message) {
  std::cerr << "mtctl: " << message << "\n"
            << "try 'mtctl --help'\n";
  return 2;
}

// Returns -1 to continue, else the exit code to end with.
int ParseArgs(int argc, char** argv, Options* opts) {
  if (const char* env = std::getenv("MTCTL_TARGET")) opts->target = env;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    // The next argument as this option's value, or null at the end.
    auto value = [&]() -> const std::string_view* {
      return i + 1 < args.size() ? &args[++i] : nullptr;
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--json") {
      opts->json = true;
    } else if (arg == "--target" || arg.rfind("--target=", 0) == 0) {
      if (arg == "--target") {
        const std::string_view* v = value();
        if (!v) return UsageError("--target needs a value");
        opts->target = std::string(*v);
      } else {
        opts->target = std::string(arg.substr(9));
      }
    } else if (arg == "--timeout" || arg.rfind("--timeout=", 0) == 0) {
      std::string_view text;
      if (arg == "--timeout") {
        const std::string_view* v = value();
        if (!v) return UsageError("--timeout needs a value");
        text = *v;
      } else {
        text = arg.substr(10);
      }
      if (!absl::SimpleAtod(std::string(text), &opts->timeout_seconds) ||
          !(opts->timeout_seconds > 0)) {
        return UsageError(absl::StrFormat("bad --timeout '%s'", std::string(text)));
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return UsageError(absl::StrFormat("unknown option '%s'", std::string(arg)));
    } else if (opts->command.empty()) {
      opts->command = std::string(arg);
    } else {
      return UsageError(absl::StrFormat("unexpected argument '%s'", std::string(arg)));
    }
  }
  if (opts->command.empty()) return UsageError("no command given");
  if (opts->command != "info") {
    return UsageError(absl::StrFormat("unknown command '%s'", opts->command));
  }
  if (opts->target.empty()) {
    return UsageError("no target: pass --target or set MTCTL_TARGET");
  }
  return -1;
}

std::string StateName(v1::RuntimeState state) {
  std::string name = v1::RuntimeState_Name(state);
  constexpr std::string_view kPrefix = "RUNTIME_STATE_";
  if (name.rfind(kPrefix, 0) == 0) name = name.substr(kPrefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(c));
  return name;
}

void PrintInfo(const v1::GetInfoResponse& info) {
  const v1::InterpreterInfo& py = info.interpreter();
  const v1::RuntimeInfo& rt = info.runtime();
  absl::PrintF("process      pid %d, mt_asyncio %s\n", info.pid(),
               info.mt_asyncio_version());
  absl::PrintF("interpreter  %s %s (%s, GIL %s) %s\n", py.implementation(),
               py.version(), py.free_threaded() ? "free-threaded" : "GIL build",
               py.gil_enabled() ? "enabled" : "disabled", py.executable());
  absl::PrintF("runtime      %s, %d workers (%d live), uptime %.1f s\n",
               StateName(rt.state()), rt.config().worker_threads(),
               rt.live_workers(), rt.uptime_seconds());
  absl::PrintF("blocking     max %d threads, idle ttl %.0f s\n",
               rt.config().blocking_threads_max(),
               rt.config().blocking_idle_ttl_seconds());
  absl::PrintF("injector     %d queued\n", rt.injector_depth());
  for (const v1::WorkerInfo& w : rt.workers()) {
    absl::PrintF("worker %-4d  units %d, parks %d, busy %.3f ms\n", w.index(),
                 w.units_run(), w.parks(), w.busy_ns() / 1e6);
  }
}

int Run(const Options& opts) {
  auto channel =
      grpc::CreateChannel(opts.target, grpc::InsecureChannelCredentials());
  auto stub = v1::RuntimeControl::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<long long>(
                           opts.timeout_seconds * 1000)));
  v1::GetInfoResponse response;
  grpc::Status status = stub->GetInfo(&context, v1::GetInfoRequest(), &response);
  if (!status.ok()) {
    std::cerr << absl::StrFormat("mtctl: %s: %s (gRPC status %d)\n",
                                 opts.target, status.error_message(),
                                 static_cast<int>(status.error_code()));
    return 1;
  }
  if (opts.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    print.always_print_primitive_fields = true;
    print.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(response, &json, print)
             .ok()) {
      std::cerr << "mtctl: could not render the response as JSON\n";
      return 1;
    }
    std::cout << json;
  } else {
    PrintInfo(response);
  }
  return 0;
}

}  // namespace
}  // namespace mt::control

int main(int argc, char** argv) {
  mt::control::Options opts;
  const int parsed = mt::control::ParseArgs(argc, argv, &opts);
  if (parsed >= 0) return parsed;
  return mt::control::Run(opts);
}
