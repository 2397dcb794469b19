#include "runtime/config.h"

#include <thread>

namespace mt::runtime {

std::size_t ResolveWorkerThreads(const Config& config) {
  if (config.worker_threads > 0) return config.worker_threads;
  // hardware_concurrency() may report 0 when it cannot tell.
  const unsigned cpus = std::thread::hardware_concurrency();
  return (cpus == 0 ? 1 : cpus) + 4;
}

}  // namespace mt::runtime
