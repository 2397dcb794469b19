#ifndef MT_RUNTIME_CONFIG_H_
#define MT_RUNTIME_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <string>

namespace mt::runtime {

// What a Runtime is built with. Defaults follow the seed README's
// `mt_asyncio.runtime()` so the Python layer can pass values straight down.
struct Config {
  // Worker threads that run units; 0 means "hardware threads + 4".
  std::size_t worker_threads = 0;
  // Upper bound of the blocking pool (threads spawned on demand).
  std::size_t blocking_threads_max = 128;
  // How long an idle blocking thread waits for work before it retires.
  std::chrono::milliseconds blocking_idle_ttl{30'000};
  // Prefix of each worker thread's OS name ("mt-worker-3").
  std::string thread_name_prefix = "mt-worker";
};

// Resolves worker_threads == 0 to the default for this machine.
std::size_t ResolveWorkerThreads(const Config& config);

}  // namespace mt::runtime

#endif  // MT_RUNTIME_CONFIG_H_
