#include "runtime/io/driver.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <limits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::runtime::io {
namespace {

absl::Status ErrnoStatus(const char* what, int err) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case EBADF:
    case EINVAL:
    case EPERM:
      return absl::InvalidArgumentError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::uint64_t Token(const ScheduledIo* io, std::uint32_t index) {
  return (std::uint64_t{io->generation()} << 32) | index;
}

std::uint32_t BitFor(Direction dir) {
  return dir == Direction::kRead ? kReadable : kWritable;
}

}  // namespace

// The unit behind a level-triggered callback. After each run it asks the
// fd itself (poll with a zero timeout) whether it is still ready, and if so
// wakes itself: the wake lands while it is still running, so the state word
// requeues it at the back of a queue instead of running it twice at once.
class LevelCallback final : public task::Task {
 public:
  LevelCallback(IoDriver* driver, ScheduledIo* io, std::uint32_t generation,
                Direction dir, absl::AnyInvocable<void()> fn)
      : Task(/*scheduled=*/false),
        driver_(driver),
        io_(io),
        generation_(generation),
        dir_(dir),
        fn_(std::move(fn)) {}

  bool Poll() override {
    fn_();
    if (state().Load() & task::State::kCancelled) return true;
    if (driver_->StillReady(io_, generation_, dir_)) {
      Wake(task::ScheduleKind::kYield);
    }
    return false;  // Lives until ClearCallback cancels it.
  }
  void OnCancel() override { fn_ = nullptr; }

 private:
  IoDriver* const driver_;
  ScheduledIo* const io_;
  const std::uint32_t generation_;
  const Direction dir_;
  absl::AnyInvocable<void()> fn_;
};

absl::StatusOr<std::unique_ptr<IoDriver>> IoDriver::Create() {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return ErrnoStatus("epoll_create1", errno);
  const int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ev < 0) {
    const int err = errno;
    close(ep);
    return ErrnoStatus("eventfd", err);
  }
  epoll_event waker{};
  waker.events = EPOLLIN | EPOLLET;
  waker.data.u64 = kWakerToken;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, ev, &waker) != 0) {
    const int err = errno;
    close(ev);
    close(ep);
    return ErrnoStatus("epoll_ctl(eventfd)", err);
  }
  return std::unique_ptr<IoDriver>(new IoDriver(ep, ev));
}

IoDriver::IoDriver(int epoll_fd, int event_fd)
    : epoll_fd_(epoll_fd), event_fd_(event_fd) {}

IoDriver::~IoDriver() {
  // Drop whatever consumers left registered so no task reference leaks.
  for (std::size_t c = 0; c < chunks_used_; ++c) {
    ScheduledIo* chunk = chunks_[c].load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < kChunkSize; ++i) {
      if (chunk[i].fd() >= 0) (void)Deregister(&chunk[i]);
    }
  }
  close(event_fd_);
  close(epoll_fd_);
  for (std::size_t c = 0; c < chunks_used_; ++c) {
    delete[] chunks_[c].load(std::memory_order_relaxed);
  }
}

ScheduledIo* IoDriver::AllocateRecord() {
  std::lock_guard<std::mutex> lock(slab_mu_);
  if (free_list_ == nullptr) {
    if (chunks_used_ == kMaxChunks) return nullptr;
    auto* chunk = new ScheduledIo[kChunkSize];
    const std::size_t base = chunks_used_ * kChunkSize;
    for (std::size_t i = kChunkSize; i-- > 0;) {
      chunk[i].index_ = static_cast<std::uint32_t>(base + i);
      chunk[i].next_free_ = free_list_;
      free_list_ = &chunk[i];
    }
    chunks_[chunks_used_].store(chunk, std::memory_order_release);
    ++chunks_used_;
  }
  ScheduledIo* io = free_list_;
  free_list_ = io->next_free_;
  io->next_free_ = nullptr;
  return io;
}

void IoDriver::ReleaseRecord(ScheduledIo* io) {
  std::lock_guard<std::mutex> lock(slab_mu_);
  io->next_free_ = free_list_;
  free_list_ = io;
}

ScheduledIo* IoDriver::Lookup(std::uint64_t token) const {
  const auto index = static_cast<std::uint32_t>(token);
  const auto generation = static_cast<std::uint32_t>(token >> 32);
  const std::size_t chunk = index / kChunkSize;
  if (chunk >= kMaxChunks) return nullptr;
  ScheduledIo* base = chunks_[chunk].load(std::memory_order_acquire);
  if (base == nullptr) return nullptr;
  ScheduledIo* io = &base[index % kChunkSize];
  // A deregistered record has a newer generation: the event is stale.
  return io->generation() == generation ? io : nullptr;
}

absl::StatusOr<ScheduledIo*> IoDriver::Register(int fd) {
  if (fd < 0) return absl::InvalidArgumentError("negative file descriptor");
  ScheduledIo* io = AllocateRecord();
  if (io == nullptr) return absl::ResourceExhaustedError("too many fds");
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    io->fd_.store(fd, std::memory_order_release);
    io->readiness_.store(0, std::memory_order_release);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = Token(io, io->index_);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int err = errno;
    {
      std::lock_guard<std::mutex> lock(io->mu_);
      io->fd_.store(-1, std::memory_order_release);
    }
    ReleaseRecord(io);
    return ErrnoStatus("epoll_ctl(ADD)", err);
  }
  registered_.fetch_add(1, std::memory_order_relaxed);
  return io;
}

absl::Status IoDriver::Deregister(ScheduledIo* io) {
  task::Task* dropped[4];
  int fd;
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    fd = io->fd();
    if (fd < 0) return absl::NotFoundError("fd is not registered");
    io->fd_.store(-1, std::memory_order_release);
    // From here on, events already fetched for this record are stale.
    io->generation_.fetch_add(1, std::memory_order_acq_rel);
    dropped[0] = std::exchange(io->waiters_[0], nullptr);
    dropped[1] = std::exchange(io->waiters_[1], nullptr);
    dropped[2] = std::exchange(io->callbacks_[0], nullptr);
    dropped[3] = std::exchange(io->callbacks_[1], nullptr);
  }
  // The fd may already be closed by its owner; epoll dropped it then.
  const bool removed = epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) == 0;
  const int err = errno;
  registered_.fetch_sub(1, std::memory_order_relaxed);
  for (int i = 0; i < 4; ++i) {
    if (dropped[i] == nullptr) continue;
    if (i >= 2) dropped[i]->Cancel();
    dropped[i]->Unref();
  }
  ReleaseRecord(io);
  if (!removed && err != EBADF && err != ENOENT) {
    return ErrnoStatus("epoll_ctl(DEL)", err);
  }
  return absl::OkStatus();
}

std::optional<ReadyEvent> IoDriver::PollReady(ScheduledIo* io, Direction dir,
                                              task::Task* waiter,
                                              std::optional<std::uint32_t> generation) {
  const std::uint32_t want = BitFor(dir) | kReadClosed * (dir == Direction::kRead) |
                             kWriteClosed | kError;
  const auto stale = [&] { return generation && io->generation() != *generation; };
  std::uint64_t word = io->readiness_.load(std::memory_order_acquire);
  if ((static_cast<std::uint32_t>(word) & want) && !stale()) {
    return ReadyEvent{static_cast<std::uint32_t>(word),
                      static_cast<std::uint32_t>(word >> 32)};
  }
  task::Task* previous;
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    // Deregister bumps the generation under this lock.
    if (stale()) return std::nullopt;
    // Re-check under the lock: Dispatch sets bits under it too.
    word = io->readiness_.load(std::memory_order_acquire);
    if (static_cast<std::uint32_t>(word) & want) {
      return ReadyEvent{static_cast<std::uint32_t>(word),
                        static_cast<std::uint32_t>(word >> 32)};
    }
    waiter->Ref();
    previous = std::exchange(io->waiters_[static_cast<int>(dir)], waiter);
  }
  if (previous != nullptr) previous->Unref();
  return std::nullopt;
}

void IoDriver::ClearReadiness(ScheduledIo* io, Direction dir, ReadyEvent event) {
  const std::uint32_t clear = BitFor(dir) & event.ready;
  std::uint64_t word = io->readiness_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<std::uint32_t>(word >> 32) != event.tick) return;
    const std::uint64_t next = word & ~std::uint64_t{clear};
    if (io->readiness_.compare_exchange_weak(word, next,
                                             std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
      return;
    }
  }
}

void IoDriver::SetCallback(ScheduledIo* io, Direction dir,
                           task::Executor* executor,
                           absl::AnyInvocable<void()> fn) {
  auto* cb = new LevelCallback(this, io, io->generation(), dir, std::move(fn));
  cb->set_executor(executor);
  task::Task* previous;
  bool ready;
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    previous = std::exchange(io->callbacks_[static_cast<int>(dir)], cb);
    ready = io->readiness() & (BitFor(dir) | kError |
                               (dir == Direction::kRead ? kReadClosed : kWriteClosed));
  }
  if (previous != nullptr) {
    previous->Cancel();
    previous->Unref();
  }
  // Already ready: an edge may have come and gone before we were listening.
  if (ready) cb->Wake(task::ScheduleKind::kWake);
}

bool IoDriver::ClearCallback(ScheduledIo* io, Direction dir) {
  task::Task* cb;
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    cb = std::exchange(io->callbacks_[static_cast<int>(dir)], nullptr);
  }
  if (cb == nullptr) return false;
  cb->Cancel();
  cb->Unref();
  return true;
}

bool IoDriver::StillReady(ScheduledIo* io, std::uint32_t generation,
                          Direction dir) {
  if (io->generation() != generation) return false;
  const std::uint64_t before = io->readiness_.load(std::memory_order_acquire);
  pollfd p{};
  p.fd = io->fd();
  p.events = dir == Direction::kRead ? POLLIN : POLLOUT;
  if (p.fd < 0) return false;
  const int n = poll(&p, 1, 0);
  if (n > 0 && (p.revents & (p.events | POLLHUP | POLLERR))) return true;
  if (n < 0) return false;
  ClearReadiness(io, dir,
                 ReadyEvent{static_cast<std::uint32_t>(before),
                            static_cast<std::uint32_t>(before >> 32)});
  return false;
}

void IoDriver::Dispatch(ScheduledIo* io, std::uint32_t generation,
                        std::uint32_t events, std::uint32_t tick) {
  std::uint32_t bits = 0;
  if (events & EPOLLIN) bits |= kReadable;
  if (events & EPOLLOUT) bits |= kWritable;
  if (events & (EPOLLRDHUP | EPOLLHUP)) bits |= kReadClosed | kReadable;
  if (events & EPOLLHUP) bits |= kWriteClosed | kWritable;
  if (events & EPOLLERR) bits |= kError | kReadable | kWritable;
  task::Task* wake_once[2] = {nullptr, nullptr};
  task::Task* callbacks[2] = {nullptr, nullptr};
  {
    std::lock_guard<std::mutex> lock(io->mu_);
    // Deregistered (and maybe reused for another fd) since the batch was
    // fetched: the bits are not the new fd's to see.
    if (io->generation() != generation) return;
    std::uint64_t word = io->readiness_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint64_t next =
          (std::uint64_t{tick} << 32) | (static_cast<std::uint32_t>(word) | bits);
      if (io->readiness_.compare_exchange_weak(word, next,
                                               std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
        break;
      }
    }
    for (int d = 0; d < 2; ++d) {
      if (!(bits & (d == 0 ? kReadable : kWritable))) continue;
      wake_once[d] = std::exchange(io->waiters_[d], nullptr);
      callbacks[d] = io->callbacks_[d];
      if (callbacks[d] != nullptr) callbacks[d]->Ref();
    }
  }
  for (int d = 0; d < 2; ++d) {
    if (wake_once[d] != nullptr) {
      wake_once[d]->Wake(task::ScheduleKind::kIo);
      wake_once[d]->Unref();
    }
    if (callbacks[d] != nullptr) {
      callbacks[d]->Wake(task::ScheduleKind::kIo);
      callbacks[d]->Unref();
    }
  }
}

std::size_t IoDriver::Turn(int timeout_ms) {
  const int n = epoll_wait(epoll_fd_, events_.data(),
                           static_cast<int>(events_.size()), timeout_ms);
  return DispatchEvents(n);
}

namespace {
// epoll_pwait2 (Linux 5.11) takes a nanosecond timeout; without it a
// sub-millisecond timer would sleep a whole extra millisecond.
std::atomic<bool> have_epoll_pwait2{true};
}  // namespace

std::size_t IoDriver::TurnFor(std::optional<std::chrono::nanoseconds> timeout) {
  if (have_epoll_pwait2.load(std::memory_order_relaxed)) {
    timespec ts{};
    if (timeout) {
      const auto ns = std::max<std::int64_t>(timeout->count(), 0);
      ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    const int n = epoll_pwait2(epoll_fd_, events_.data(),
                               static_cast<int>(events_.size()),
                               timeout ? &ts : nullptr, nullptr);
    if (n >= 0 || errno != ENOSYS) return DispatchEvents(n);
    have_epoll_pwait2.store(false, std::memory_order_relaxed);
  }
  int timeout_ms = -1;
  if (timeout) {
    // Round up: waking a little late is fine, early means a wasted turn.
    timeout_ms = static_cast<int>(
        std::min<std::int64_t>((std::max<std::int64_t>(timeout->count(), 0) + 999'999) /
                                   1'000'000,
                               std::numeric_limits<int>::max()));
  }
  return Turn(timeout_ms);
}

std::size_t IoDriver::DispatchEvents(int n) {
  if (n <= 0) return 0;  // Timeout or EINTR: the caller re-evaluates.
  const std::uint32_t tick = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::size_t dispatched = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t token = events_[i].data.u64;
    if (token == kWakerToken) {
      std::uint64_t drained;
      (void)!read(event_fd_, &drained, sizeof(drained));
      continue;
    }
    if (ScheduledIo* io = Lookup(token)) {
      Dispatch(io, static_cast<std::uint32_t>(token >> 32), events_[i].events,
               tick);
      ++dispatched;
    }
  }
  return dispatched;
}

void IoDriver::Wake() {
  const std::uint64_t one = 1;
  (void)!write(event_fd_, &one, sizeof(one));
}

}  // namespace mt::runtime::io
