#include "runtime/config.h"

#include <thread>

namespace mt::runtime {

std::size_t ResolveWorkerThreads(const Config& config) {
  if (config.worker_threads > 0) return config.worker_threads;
  // hardware_concurrency() may report 0 when it cannot tell.
  const unsigned cpus = std::thread::hardware_concurrency();
  return (cpus == 0 ? 1 : cpus) + 4;
}

std::string_view ReactorModeName(ReactorMode mode) {
  switch (mode) {
    case ReactorMode::kWorkers:
      return "workers";
    case ReactorMode::kDedicatedThread:
      return "dedicated-thread";
  }
  return "unknown";
}

}  // namespace mt::runtime
