#ifndef MT_RUNTIME_BLOCKING_STATS_H_
#define MT_RUNTIME_BLOCKING_STATS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace mt::runtime::blocking {

// What the blocking pool reports; also the admin snapshot's view of it.
struct BlockingPoolStats {
  std::size_t threads = 0;
  std::size_t idle = 0;
  std::size_t running = 0;
  std::size_t queued = 0;
  std::size_t max_threads = 0;
  std::chrono::milliseconds idle_ttl{0};
  std::uint64_t completed = 0;
  std::uint64_t cancelled = 0;
  // Jobs still running when a shutdown gave up on them (see
  // BlockingPool::Shutdown(abandon_after)).
  std::size_t abandoned = 0;
};

}  // namespace mt::runtime::blocking

#endif  // MT_RUNTIME_BLOCKING_STATS_H_
