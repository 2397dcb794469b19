#ifndef MT_RUNTIME_IO_SCHEDULED_IO_H_
#define MT_RUNTIME_IO_SCHEDULED_IO_H_

#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/task/task.h"

namespace mt::runtime::io {

// Directions a consumer waits for.
enum class Direction : int { kRead = 0, kWrite = 1 };

// Readiness bits cached per fd.
inline constexpr std::uint32_t kReadable = 1u << 0;
inline constexpr std::uint32_t kWritable = 1u << 1;
inline constexpr std::uint32_t kReadClosed = 1u << 2;
inline constexpr std::uint32_t kWriteClosed = 1u << 3;
inline constexpr std::uint32_t kError = 1u << 4;

// Readiness as a consumer saw it, with the driver tick it was set at: a
// consumer that hits EAGAIN clears only what it saw, and only if no newer
// event arrived in between.
struct ReadyEvent {
  std::uint32_t ready = 0;
  std::uint32_t tick = 0;
};

// The per-fd record, registered once with epoll for both directions
// (edge-triggered). Cache-line aligned so two busy fds never share a line.
// Records live in the driver's slab and are recycled, never freed while the
// driver lives; the generation tells stale epoll events and stale handles
// from live ones.
class alignas(64) ScheduledIo {
 public:
  int fd() const { return fd_.load(std::memory_order_acquire); }
  std::uint32_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  // Racy snapshot of the cached readiness bits.
  std::uint32_t readiness() const {
    return static_cast<std::uint32_t>(readiness_.load(std::memory_order_acquire));
  }

 private:
  friend class IoDriver;

  // Low 32 bits readiness, high 32 bits the driver tick of the last event.
  std::atomic<std::uint64_t> readiness_{0};
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<int> fd_{-1};
  std::uint32_t index_ = 0;
  std::mutex mu_;
  // One-shot waiters ("wake me when readable"), each holding a reference.
  task::Task* waiters_[2] = {nullptr, nullptr};  // Guarded by mu_.
  // Level-triggered callback units (add_reader), each holding a reference.
  task::Task* callbacks_[2] = {nullptr, nullptr};  // Guarded by mu_.
  ScheduledIo* next_free_ = nullptr;  // Guarded by the driver's slab lock.
};

}  // namespace mt::runtime::io

#endif  // MT_RUNTIME_IO_SCHEDULED_IO_H_
