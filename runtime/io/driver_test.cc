#include "runtime/io/driver.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/testing/test_tasks.h"

namespace mt::runtime::io {
namespace {

using testing::CountingTask;
using testing::QueueExecutor;

struct SocketPair {
  SocketPair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         0, fds),
              0);
  }
  ~SocketPair() {
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

std::unique_ptr<IoDriver> NewDriver() {
  auto driver = IoDriver::Create();
  EXPECT_TRUE(driver.ok()) << driver.status();
  return std::move(*driver);
}

TEST(IoDriverTest, RegisterRejectsBadAndDuplicateFds) {
  auto driver = NewDriver();
  EXPECT_EQ(driver->Register(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(driver->Register(1'000'000).status().code(),
            absl::StatusCode::kInvalidArgument);  // EBADF
  SocketPair sp;
  auto io = driver->Register(sp.fds[0]);
  ASSERT_TRUE(io.ok());
  EXPECT_EQ(driver->Register(sp.fds[0]).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(driver->registered(), 1u);
  EXPECT_TRUE(driver->Deregister(*io).ok());
  EXPECT_EQ(driver->Deregister(*io).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(driver->registered(), 0u);
}

TEST(IoDriverTest, TurnForSleepsSubMillisecondTimeoutsWithoutRoundingUp) {
  auto driver = NewDriver();
  using Clock = std::chrono::steady_clock;
  // The fastest of several turns: slow wakeups on a loaded machine must not
  // fail the test, but a driver that rounds 300 us up to a whole
  // millisecond never gets below it.
  std::vector<Clock::duration> took;
  for (int i = 0; i < 9; ++i) {
    const auto start = Clock::now();
    EXPECT_EQ(driver->TurnFor(std::chrono::microseconds(300)), 0u);
    took.push_back(Clock::now() - start);
    EXPECT_GE(took.back(), std::chrono::microseconds(300));  // Never early.
  }
  EXPECT_LT(*std::min_element(took.begin(), took.end()),
            std::chrono::microseconds(950));
}

TEST(IoDriverTest, WaiterIsWokenOnceWhenReadable) {
  auto driver = NewDriver();
  QueueExecutor ex;
  std::atomic<int> polls{0}, destroyed{0};
  auto* waiter = new CountingTask(&polls, &destroyed, 0);
  waiter->set_executor(&ex);
  SocketPair sp;
  ScheduledIo* io = *driver->Register(sp.fds[0]);
  driver->Turn(0);  // Initial writable edge.
  EXPECT_TRUE(io->readiness() & kWritable);
  EXPECT_EQ(driver->PollReady(io, Direction::kRead, waiter), std::nullopt);
  EXPECT_EQ(ex.size(), 0u);
  ASSERT_EQ(write(sp.fds[1], "x", 1), 1);
  EXPECT_EQ(driver->Turn(1000), 1u);
  EXPECT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex.last_kind(), task::ScheduleKind::kIo);
  auto ready = driver->PollReady(io, Direction::kRead, waiter);
  ASSERT_TRUE(ready.has_value());
  EXPECT_TRUE(ready->ready & kReadable);
  ex.RunAll();
  ASSERT_TRUE(driver->Deregister(io).ok());
  waiter->Unref();
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(IoDriverTest, StaleConsumerNeitherSeesNorDisplacesTheRecordsNextFd) {
  // A consumer removed by another thread may still be finishing a run when
  // its record is reused for the next fd: its PollReady must not report
  // the new fd's readiness or take the new consumer's place as waiter.
  auto driver = NewDriver();
  QueueExecutor ex;
  std::atomic<int> polls{0}, stale_destroyed{0}, fresh_destroyed{0};
  SocketPair a;
  ScheduledIo* io = *driver->Register(a.fds[0]);
  const std::uint32_t old_generation = io->generation();
  ASSERT_TRUE(driver->Deregister(io).ok());
  SocketPair b;
  ScheduledIo* reused = *driver->Register(b.fds[0]);
  ASSERT_EQ(reused, io);
  driver->Turn(0);  // The new fd's writable edge.
  auto* stale = new CountingTask(&polls, &stale_destroyed, 0);
  auto* fresh = new CountingTask(&polls, &fresh_destroyed, 0);
  stale->set_executor(&ex);
  fresh->set_executor(&ex);
  EXPECT_EQ(driver->PollReady(io, Direction::kWrite, stale, old_generation), std::nullopt);
  EXPECT_EQ(driver->PollReady(io, Direction::kRead, fresh, io->generation()), std::nullopt);
  EXPECT_EQ(driver->PollReady(io, Direction::kRead, stale, old_generation), std::nullopt);
  ASSERT_EQ(write(b.fds[1], "x", 1), 1);
  driver->Turn(1000);
  ASSERT_EQ(ex.size(), 1u);  // The fresh waiter, woken once; never the stale one.
  ex.RunAll();
  stale->Unref();
  EXPECT_EQ(stale_destroyed.load(), 1);  // Never armed: no reference taken.
  ASSERT_TRUE(driver->Deregister(reused).ok());
  fresh->Unref();
  EXPECT_EQ(fresh_destroyed.load(), 1);
}

TEST(IoDriverTest, ClearReadinessKeepsNewerEvent) {
  auto driver = NewDriver();
  SocketPair sp;
  ScheduledIo* io = *driver->Register(sp.fds[0]);
  ASSERT_EQ(write(sp.fds[1], "a", 1), 1);
  driver->Turn(1000);
  QueueExecutor ex;
  std::atomic<int> polls{0};
  auto* waiter = new CountingTask(&polls, nullptr, 0);
  waiter->set_executor(&ex);
  auto seen = driver->PollReady(io, Direction::kRead, waiter);
  ASSERT_TRUE(seen.has_value());
  // A new event arrives before the consumer reaches EAGAIN...
  ASSERT_EQ(write(sp.fds[1], "b", 1), 1);
  driver->Turn(1000);
  // ...so clearing with the stale tick must keep the readable bit.
  driver->ClearReadiness(io, Direction::kRead, *seen);
  EXPECT_TRUE(io->readiness() & kReadable);
  auto fresh = driver->PollReady(io, Direction::kRead, waiter);
  ASSERT_TRUE(fresh.has_value());
  driver->ClearReadiness(io, Direction::kRead, *fresh);
  EXPECT_FALSE(io->readiness() & kReadable);
  ASSERT_TRUE(driver->Deregister(io).ok());
  waiter->Unref();
}

TEST(IoDriverTest, EventsOfDeregisteredFdInSameBatchAreIgnored) {
  auto driver = NewDriver();
  QueueExecutor ex;
  std::atomic<int> polls{0}, destroyed{0};
  SocketPair a;
  ScheduledIo* io = *driver->Register(a.fds[0]);
  driver->Turn(0);
  auto* waiter = new CountingTask(&polls, &destroyed, 0);
  waiter->set_executor(&ex);
  ASSERT_EQ(driver->PollReady(io, Direction::kRead, waiter), std::nullopt);
  const std::uint32_t old_generation = io->generation();
  ASSERT_TRUE(driver->Deregister(io).ok());
  EXPECT_NE(io->generation(), old_generation);
  // Reuse of the same record for another fd must not see old events.
  SocketPair b;
  ScheduledIo* io2 = *driver->Register(b.fds[0]);
  EXPECT_EQ(io2, io);
  ASSERT_EQ(write(a.fds[1], "x", 1), 1);
  driver->Turn(50);
  EXPECT_EQ(ex.size(), 0u);
  EXPECT_EQ(destroyed.load(), 0);
  waiter->Unref();
  EXPECT_EQ(destroyed.load(), 1);  // Deregister dropped the waiter's ref.
  ASSERT_TRUE(driver->Deregister(io2).ok());
}

// add_reader semantics: the callback runs again while data remains and
// stops once the fd is drained; a new edge starts it again.
TEST(IoDriverTest, LevelCallbackRunsWhileReadable) {
  auto driver = NewDriver();
  QueueExecutor ex;
  SocketPair sp;
  ScheduledIo* io = *driver->Register(sp.fds[0]);
  int runs = 0;
  driver->SetCallback(io, Direction::kRead, &ex, [&] {
    ++runs;
    char c;
    (void)!read(sp.fds[0], &c, 1);  // One byte per run.
  });
  ASSERT_EQ(write(sp.fds[1], "abc", 3), 3);
  driver->Turn(1000);
  ex.RunAll();
  EXPECT_EQ(runs, 3);  // Re-run while readable, stopped when drained.
  EXPECT_FALSE(io->readiness() & kReadable);
  ASSERT_EQ(write(sp.fds[1], "d", 1), 1);
  driver->Turn(1000);
  ex.RunAll();
  EXPECT_EQ(runs, 4);
  EXPECT_TRUE(driver->ClearCallback(io, Direction::kRead));
  EXPECT_FALSE(driver->ClearCallback(io, Direction::kRead));
  ASSERT_EQ(write(sp.fds[1], "e", 1), 1);
  driver->Turn(100);
  ex.RunAll();
  EXPECT_EQ(runs, 4);
  ASSERT_TRUE(driver->Deregister(io).ok());
}

TEST(IoDriverTest, CallbackInstalledOnReadyFdRunsAtOnce) {
  auto driver = NewDriver();
  QueueExecutor ex;
  SocketPair sp;
  ScheduledIo* io = *driver->Register(sp.fds[0]);
  driver->Turn(100);  // Writable edge consumed before anyone listened.
  int runs = 0;
  driver->SetCallback(io, Direction::kWrite, &ex, [&] { ++runs; });
  EXPECT_EQ(ex.size(), 1u);
  // Run it once by hand: still writable, so it requeues itself.
  task::RunTask(ex.Pop());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ex.size(), 1u);
  EXPECT_TRUE(driver->ClearCallback(io, Direction::kWrite));
  ex.RunAll();  // The cancel path: the callback does not run again.
  EXPECT_EQ(runs, 1);
  ASSERT_TRUE(driver->Deregister(io).ok());
}

TEST(IoDriverTest, HangupWakesReader) {
  auto driver = NewDriver();
  QueueExecutor ex;
  std::atomic<int> polls{0};
  auto* waiter = new CountingTask(&polls, nullptr, 0);
  waiter->set_executor(&ex);
  SocketPair sp;
  ScheduledIo* io = *driver->Register(sp.fds[0]);
  driver->Turn(0);
  ASSERT_EQ(driver->PollReady(io, Direction::kRead, waiter), std::nullopt);
  close(sp.fds[1]);
  sp.fds[1] = -1;
  driver->Turn(1000);
  EXPECT_EQ(ex.size(), 1u);
  EXPECT_TRUE(io->readiness() & kReadClosed);
  ex.RunAll();
  ASSERT_TRUE(driver->Deregister(io).ok());
  waiter->Unref();
}

TEST(IoDriverTest, WakeInterruptsTurn) {
  auto driver = NewDriver();
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    driver->Wake();
  });
  const auto begin = std::chrono::steady_clock::now();
  driver->Turn(10'000);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  waker.join();
}

TEST(IoDriverTest, DestructorReleasesLeftoverRegistrations) {
  std::atomic<int> polls{0}, destroyed{0};
  QueueExecutor ex;
  SocketPair sp;
  {
    auto driver = NewDriver();
    ScheduledIo* io = *driver->Register(sp.fds[0]);
    driver->Turn(0);
    auto* waiter = new CountingTask(&polls, &destroyed, 0);
    waiter->set_executor(&ex);
    driver->PollReady(io, Direction::kRead, waiter);
    waiter->Unref();
  }
  EXPECT_EQ(destroyed.load(), 1);
}

}  // namespace
}  // namespace mt::runtime::io
