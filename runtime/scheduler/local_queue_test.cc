#include "runtime/scheduler/local_queue.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mt::runtime::scheduler {
namespace {

// Queues only move pointers; these tasks are never run.
class Dummy final : public task::Task {
 public:
  explicit Dummy(int id) : Task(true), id(id) {}
  bool Poll() override { return true; }
  const int id;
};

std::vector<std::unique_ptr<Dummy>> MakeTasks(int n) {
  std::vector<std::unique_ptr<Dummy>> tasks;
  for (int i = 0; i < n; ++i) tasks.push_back(std::make_unique<Dummy>(i));
  return tasks;
}

TEST(LocalQueueTest, OwnerPopIsFifo) {
  LocalQueue q;
  auto tasks = MakeTasks(10);
  for (auto& t : tasks) ASSERT_TRUE(q.TryPush(t.get()));
  EXPECT_EQ(q.Len(), 10u);
  for (int i = 0; i < 10; ++i) {
    auto* t = static_cast<Dummy*>(q.Pop());
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->id, i);
  }
  EXPECT_EQ(q.Pop(), nullptr);
  EXPECT_TRUE(q.IsEmpty());
}

TEST(LocalQueueTest, FullRingRefusesAndOverflowTakesOlderHalf) {
  LocalQueue q;
  auto tasks = MakeTasks(LocalQueue::kCapacity + 1);
  for (std::uint32_t i = 0; i < LocalQueue::kCapacity; ++i) {
    ASSERT_TRUE(q.TryPush(tasks[i].get()));
  }
  EXPECT_EQ(q.RemainingSlots(), 0u);
  EXPECT_FALSE(q.TryPush(tasks.back().get()));
  std::vector<task::Task*> out;
  ASSERT_TRUE(q.TakeHalfForOverflow(out));
  ASSERT_EQ(out.size(), LocalQueue::kCapacity / 2);
  EXPECT_EQ(static_cast<Dummy*>(out.front())->id, 0);
  EXPECT_EQ(q.Len(), LocalQueue::kCapacity / 2);
  EXPECT_TRUE(q.TryPush(tasks.back().get()));
  EXPECT_EQ(static_cast<Dummy*>(q.Pop())->id,
            static_cast<int>(LocalQueue::kCapacity / 2));
}

TEST(LocalQueueTest, WrapsAroundManyTimes) {
  LocalQueue q;
  auto tasks = MakeTasks(7);
  for (int round = 0; round < 5000; ++round) {
    for (auto& t : tasks) ASSERT_TRUE(q.TryPush(t.get()));
    for (auto& t : tasks) ASSERT_EQ(q.Pop(), t.get());
  }
}

TEST(LocalQueueTest, StealTakesHalfAndReturnsOne) {
  LocalQueue victim, thief;
  auto tasks = MakeTasks(10);
  for (auto& t : tasks) victim.TryPush(t.get());
  std::uint32_t stolen = 0;
  task::Task* run_now = victim.StealInto(thief, stolen);
  ASSERT_NE(run_now, nullptr);
  EXPECT_EQ(stolen, 5u);
  EXPECT_EQ(victim.Len(), 5u);
  EXPECT_EQ(thief.Len(), 4u);
  // The oldest tasks are stolen, in order; the last one runs at once.
  EXPECT_EQ(static_cast<Dummy*>(thief.Pop())->id, 0);
  EXPECT_EQ(static_cast<Dummy*>(run_now)->id, 4);
  EXPECT_EQ(static_cast<Dummy*>(victim.Pop())->id, 5);
}

TEST(LocalQueueTest, StealFromSingleTaskQueue) {
  LocalQueue victim, thief;
  Dummy t(1);
  victim.TryPush(&t);
  std::uint32_t stolen = 0;
  EXPECT_EQ(victim.StealInto(thief, stolen), &t);
  EXPECT_EQ(stolen, 1u);
  EXPECT_TRUE(victim.IsEmpty());
  EXPECT_TRUE(thief.IsEmpty());
  EXPECT_EQ(victim.StealInto(thief, stolen), nullptr);
}

TEST(LocalQueueTest, ThiefWithFullQueueDoesNotSteal) {
  LocalQueue victim, thief;
  auto tasks = MakeTasks(LocalQueue::kCapacity);
  for (std::uint32_t i = 0; i < LocalQueue::kCapacity / 2 + 1; ++i) {
    thief.TryPush(tasks[i].get());
  }
  Dummy t(1);
  victim.TryPush(&t);
  std::uint32_t stolen = 0;
  EXPECT_EQ(victim.StealInto(thief, stolen), nullptr);
  EXPECT_EQ(victim.Len(), 1u);
}

// The owner pushes and pops while three thieves steal concurrently: every
// task must come out exactly once.
TEST(LocalQueueTest, ConcurrentOwnerAndThievesSeeEachTaskOnce) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int kTasks = 100'000;
#else
  constexpr int kTasks = 1'000'000;
#endif
  LocalQueue owner_queue;
  auto tasks = MakeTasks(kTasks);
  std::vector<std::atomic<int>> seen(kTasks);
  std::atomic<bool> done{false};
  std::atomic<int> taken{0};
  auto record = [&](task::Task* t) {
    seen[static_cast<Dummy*>(t)->id].fetch_add(1);
    taken.fetch_add(1);
  };
  std::vector<std::thread> thieves;
  for (int k = 0; k < 3; ++k) {
    thieves.emplace_back([&] {
      LocalQueue mine;
      while (!done.load() || !owner_queue.IsEmpty()) {
        std::uint32_t stolen = 0;
        if (task::Task* t = owner_queue.StealInto(mine, stolen)) {
          record(t);
          while (task::Task* u = mine.Pop()) record(u);
        }
      }
    });
  }
  int pushed = 0;
  while (pushed < kTasks) {
    if (owner_queue.TryPush(tasks[pushed].get())) {
      ++pushed;
    } else if (task::Task* t = owner_queue.Pop()) {
      record(t);
    }
    if (pushed % 3 == 0) {
      if (task::Task* t = owner_queue.Pop()) record(t);
    }
  }
  while (task::Task* t = owner_queue.Pop()) record(t);
  done.store(true);
  for (auto& t : thieves) t.join();
  EXPECT_EQ(taken.load(), kTasks);
  int bad = 0;
  for (int i = 0; i < kTasks; ++i) bad += seen[i].load() != 1;
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace mt::runtime::scheduler
