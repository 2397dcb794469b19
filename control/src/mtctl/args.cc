#include "control/src/mtctl/args.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace mt::control::mtctl {

const char kUsage[] = R"(usage: mtctl [OPTIONS] COMMAND [ARGS]

Inspect and steer live mt_asyncio processes over their control plane.

options:
  --target TARGET     the process: unix:///PATH, a PID (its socket in the
                      default folder), or HOST:PORT (TLS); default
                      $MTCTL_TARGET, else the only process of this user.
                      Repeat it (or use --targets-file) to ask several:
                      info, workers, loops, tasks, health and top then
                      print one table with a TARGET column
  --targets-file FILE targets, one a line ('#' starts a comment)
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
  metrics [--openmetrics]      the metrics page (Prometheus text format;
                               docs/metrics.md)
  doctor [--window SECONDS] [--min-step SECONDS]
                               what may be wrong with the tasks: lost
                               wakeups, long steps (with their stack),
                               spinning tasks, lock holders and waiters,
                               deadlocks (docs/diagnostics.md)
  list                         this user's mt_asyncio processes on the machine

exit status: 0 success, 1 the call failed, 2 bad usage, 3 not found, 5
doctor found something; with
several targets 0 when every target answered, 1 when none did, 4 when
some did not (stderr names each one that failed).
)";

int UsageError(const std::string& message) {
  std::cerr << "mtctl: " << message << "\ntry 'mtctl --help'\n";
  return kExitUsage;
}

namespace {

// The targets in `path`, one a line; blank lines and those starting with
// '#' are skipped. Returns -1 when read, else the exit code.
int ReadTargets(const std::string& path, std::vector<std::string>* targets) {
  std::ifstream in(path);
  if (!in) return UsageError("cannot read --targets-file '" + path + "'");
  std::string line;
  std::size_t read = 0;
  while (std::getline(in, line)) {
    if ((read += line.size() + 1) > (1u << 20)) {
      return UsageError("--targets-file '" + path + "' is over 1 MiB");
    }
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::size_t last = line.find_last_not_of(" \t\r");
    targets->push_back(line.substr(first, last - first + 1));
  }
  return -1;
}

}  // namespace

int ParseGlobal(const std::vector<std::string>& args, Options* opts) {
  if (const char* env = std::getenv("MTCTL_TARGET")) opts->target = env;
  std::size_t i = 0;
  auto value = [&](const std::string& arg, const std::string& name,
                   std::string* out) {
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
    } else if ((r = value(arg, "--target", &v)) != 0) {
      if (r < 0 || v.empty()) return UsageError("--target needs a value");
      opts->targets.push_back(v);
    } else if ((r = value(arg, "--targets-file", &v)) != 0) {
      if (r < 0) return UsageError("--targets-file needs a file");
      if (const int rc = ReadTargets(v, &opts->targets); rc >= 0) return rc;
    } else if ((r = value(arg, "--tls-ca", &opts->tls_ca)) != 0) {
      if (r < 0) return UsageError("--tls-ca needs a value");
    } else if ((r = value(arg, "--tls-cert", &opts->tls_cert)) != 0) {
      if (r < 0) return UsageError("--tls-cert needs a value");
    } else if ((r = value(arg, "--tls-key", &opts->tls_key)) != 0) {
      if (r < 0) return UsageError("--tls-key needs a value");
    } else if ((r = value(arg, "--tls-server-name", &opts->tls_server_name)) !=
               0) {
      if (r < 0) return UsageError("--tls-server-name needs a value");
    } else if ((r = value(arg, "--token-file", &opts->token_file)) != 0) {
      if (r < 0) return UsageError("--token-file needs a value");
    } else if ((r = value(arg, "--connect-timeout", &v)) != 0) {
      if (r < 0 || !absl::SimpleAtod(v, &opts->connect_timeout_seconds) ||
          !(opts->connect_timeout_seconds >= 0 &&
            opts->connect_timeout_seconds <= 3600)) {
        return UsageError("bad --connect-timeout '" + v + "'");
      }
    } else if ((r = value(arg, "--timeout", &v)) != 0) {
      if (r < 0 || !absl::SimpleAtod(v, &opts->timeout_seconds) ||
          !(opts->timeout_seconds > 0 && opts->timeout_seconds <= 3600)) {
        return UsageError("bad --timeout '" + v + "'");
      }
    } else if ((r = value(arg, "-o", &v)) != 0 ||
               (r = value(arg, "--output", &v)) != 0) {
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
  if (opts->targets.size() > kMaxTargets) {
    return UsageError(absl::StrFormat("at most %d targets at once", kMaxTargets));
  }
  if (!opts->targets.empty()) opts->target = opts->targets.front();
  return -1;
}

CommandArgs::CommandArgs(const std::vector<std::string>& args,
                         std::size_t first) {
  for (std::size_t i = first; i < args.size(); ++i) rest_.push_back(args[i]);
}

bool CommandArgs::Positional(std::string* out) {
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

bool CommandArgs::Flag(const std::string& name) {
  auto it = std::find(rest_.begin(), rest_.end(), name);
  if (it == rest_.end()) return false;
  rest_.erase(it);
  return true;
}

int CommandArgs::Value(const std::string& name, std::string* out) {
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

int CommandArgs::Number(const std::string& name, double* out, double lo,
                        double hi) {
  std::string text;
  const int found = Value(name, &text);
  if (found <= 0) return found;
  if (!absl::SimpleAtod(text, out) || !(*out >= lo && *out <= hi)) {
    UsageError(absl::StrFormat("%s must be a number in [%g, %g], got '%s'",
                               name, lo, hi, text));
    return -1;
  }
  return 1;
}

bool CommandArgs::Done() const {
  if (rest_.empty()) return true;
  UsageError("unexpected argument '" + rest_.front() + "'");
  return false;
}

bool ParseId(const std::string& text, std::uint64_t* id) {
  if (!absl::SimpleAtoi(text, id) || *id == 0) {
    UsageError("'" + text + "' is not a task id (mtctl tasks shows them)");
    return false;
  }
  return true;
}

}  // namespace mt::control::mtctl
