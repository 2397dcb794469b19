// Unique numbers for objects made on many threads at once, without one
// counter that every thread writes: each thread takes a block of numbers
// from the shared counter and hands them out itself.

#ifndef MT_RUNTIME_TASK_BLOCKED_SEQUENCE_H_
#define MT_RUNTIME_TASK_BLOCKED_SEQUENCE_H_

#include <atomic>
#include <cstdint>

namespace mt::runtime::task {

// The next number of the sequence named by `Tag` (one sequence per tag
// type, process-wide): unique, starting at 1, increasing on each thread;
// across threads in no order. A thread that draws takes `kBlock` numbers at
// a time, so the shared counter is written once per kBlock draws.
template <typename Tag, std::uint64_t kBlock>
std::uint64_t NextInSequence() {
  static std::atomic<std::uint64_t> next_block{1};
  thread_local std::uint64_t next = 0;
  thread_local std::uint64_t end = 0;
  if (next == end) {
    next = next_block.fetch_add(kBlock, std::memory_order_relaxed);
    end = next + kBlock;
  }
  return next++;
}

}  // namespace mt::runtime::task

#endif  // MT_RUNTIME_TASK_BLOCKED_SEQUENCE_H_
