#ifndef MT_CONTROL_SRC_MTCTL_ARGS_H_
#define MT_CONTROL_SRC_MTCTL_ARGS_H_

// mtctl's command line: the global options, each command's own flags, and
// the exit codes. No gRPC here, so args_test.cc tests all of it.

#include <cstdint>
#include <string>
#include <vector>

namespace mt::control::mtctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
// Across several targets: some answered, some did not (stderr names them).
inline constexpr int kExitSomeFailed = 4;
// mtctl doctor: the call worked and found something wrong.
inline constexpr int kExitFindings = 5;
// Targets one command may ask at once.
inline constexpr std::size_t kMaxTargets = 256;

// What `mtctl --help` prints.
extern const char kUsage[];

enum class Format { kTable, kWide, kJson };

struct Options {
  std::string target;  // The first of `targets`, or $MTCTL_TARGET.
  // Every --target given and each line of --targets-file, in order.
  std::vector<std::string> targets;
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

// Says `message` on stderr with a pointer to --help; returns kExitUsage.
int UsageError(const std::string& message);

// Parses the global options in `args` (argv without the program name) into
// `opts`; the target defaults to $MTCTL_TARGET. Returns -1 to go on, else
// the exit code (kExitOk after --help, which prints kUsage).
int ParseGlobal(const std::vector<std::string>& args, Options* opts);

// A command's own arguments: "--flag VALUE" (or "--flag=VALUE") pairs,
// bare flags and positionals, each taken once. Every method that can fail
// says why on stderr.
class CommandArgs {
 public:
  CommandArgs(const std::vector<std::string>& args, std::size_t first);
  // The next positional argument, in order; false if none is left.
  bool Positional(std::string* out);
  // Whether the bare flag `name` was given.
  bool Flag(const std::string& name);
  // 1 found, 0 absent, -1 error.
  int Value(const std::string& name, std::string* out);
  // Value() as a number in [lo, hi]: 1 found, 0 absent, -1 error.
  int Number(const std::string& name, double* out, double lo, double hi);
  // Call last: false (said) if anything was not consumed.
  bool Done() const;

 private:
  std::vector<std::string> rest_;
};

// A task id: a positive integer. False (said) otherwise.
bool ParseId(const std::string& text, std::uint64_t* id);

}  // namespace mt::control::mtctl

#endif  // MT_CONTROL_SRC_MTCTL_ARGS_H_
