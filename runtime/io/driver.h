#ifndef MT_RUNTIME_IO_DRIVER_H_
#define MT_RUNTIME_IO_DRIVER_H_

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/io/scheduled_io.h"
#include "runtime/task/task.h"

namespace mt::runtime::io {

// The epoll reactor. One epoll instance, edge-triggered; each fd is added
// once for both directions and owns a ScheduledIo record. An eventfd wakes a
// thread blocked in Turn().
//
// Consumers either wait once ("wake this task when readable": PollReady /
// ClearReadiness, the shape a transport's read loop wants) or install a
// level-triggered callback (what add_reader needs: it runs again while the
// fd stays ready, never on two threads at once).
class IoDriver {
 public:
  static absl::StatusOr<std::unique_ptr<IoDriver>> Create();
  ~IoDriver();
  IoDriver(const IoDriver&) = delete;
  IoDriver& operator=(const IoDriver&) = delete;

  // Registers `fd` (not owned) for both directions. AlreadyExists if it is
  // registered; the errno's status for a bad fd.
  absl::StatusOr<ScheduledIo*> Register(int fd);
  // Removes the fd from epoll, drops its waiters and callbacks (callbacks
  // are cancelled) and recycles the record. Events for it still in a batch
  // being dispatched are recognised as stale and ignored.
  absl::Status Deregister(ScheduledIo* io);

  // If `dir` is ready, returns the readiness seen. Otherwise arms `waiter`
  // (taking a reference, replacing an earlier waiter) and returns nullopt;
  // the next readiness event for `dir` wakes it once.
  //
  // A consumer that can be deregistered by another thread (an add_reader
  // unit removed by remove_reader) passes the `generation` it registered
  // under: once the record was deregistered (and perhaps reused for a new
  // fd), nothing is armed and nullopt is returned, so a stale consumer can
  // neither see the new fd's readiness nor displace its waiter. Whoever
  // deregistered it wakes it (by cancelling it) instead.
  std::optional<ReadyEvent> PollReady(
      ScheduledIo* io, Direction dir, task::Task* waiter,
      std::optional<std::uint32_t> generation = std::nullopt);
  // After EAGAIN: clears `event`'s bits for `dir` unless a newer event has
  // arrived since `event` was read.
  void ClearReadiness(ScheduledIo* io, Direction dir, ReadyEvent event);

  // Installs a level-triggered callback for `dir`: `fn` runs on a worker
  // each time the fd is ready and again while it stays ready. Replaces (and
  // cancels) an earlier one. `executor` schedules the callback unit.
  void SetCallback(ScheduledIo* io, Direction dir, task::Executor* executor,
                   absl::AnyInvocable<void()> fn);
  // Returns true if a callback was installed.
  bool ClearCallback(ScheduledIo* io, Direction dir);

  // Waits up to `timeout_ms` (-1: forever) for events and dispatches them.
  // Returns the number of fd events dispatched. One thread at a time.
  std::size_t Turn(int timeout_ms);
  // Turn with a nanosecond timeout (nullopt: until woken); uses
  // epoll_pwait2 where the kernel has it, else rounds up to milliseconds.
  std::size_t TurnFor(std::optional<std::chrono::nanoseconds> timeout);
  // Wakes a thread inside Turn. Async-signal-safe (one write(2)).
  void Wake();

  std::size_t registered() const {
    return registered_.load(std::memory_order_relaxed);
  }

 private:
  // Dispatches the first `n` entries of events_ (n <= 0: nothing).
  std::size_t DispatchEvents(int n);

  friend class LevelCallback;
  static constexpr std::uint64_t kWakerToken = ~std::uint64_t{0};
  static constexpr std::size_t kChunkSize = 256;
  static constexpr std::size_t kMaxChunks = 4096;

  IoDriver(int epoll_fd, int event_fd);
  ScheduledIo* AllocateRecord();
  void ReleaseRecord(ScheduledIo* io);
  ScheduledIo* Lookup(std::uint64_t token) const;
  void Dispatch(ScheduledIo* io, std::uint32_t generation, std::uint32_t events,
                std::uint32_t tick);
  // For a level-triggered callback after it ran: is `dir` still ready? If
  // not, clears the cached bit (tick-checked) so the next edge re-runs it.
  bool StillReady(ScheduledIo* io, std::uint32_t generation, Direction dir);

  const int epoll_fd_;
  const int event_fd_;
  std::atomic<std::uint32_t> tick_{0};
  std::atomic<std::size_t> registered_{0};

  std::mutex slab_mu_;
  std::size_t chunks_used_ = 0;        // Guarded by slab_mu_.
  ScheduledIo* free_list_ = nullptr;   // Guarded by slab_mu_.
  std::array<std::atomic<ScheduledIo*>, kMaxChunks> chunks_{};
  std::array<epoll_event, 1024> events_;  // Only the thread in Turn.
};

}  // namespace mt::runtime::io

#endif  // MT_RUNTIME_IO_DRIVER_H_
