#include "control/src/inspection_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>
#include <vector>

namespace mt::control {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const std::function<bool()> kStay = [] { return false; };
constexpr bool kAdmin = true;
constexpr bool kReadOnly = false;

// Spends `cpu` of this thread's CPU time.
void Burn(milliseconds cpu) {
  const std::int64_t until =
      InspectionBudget::ThreadCpuNs() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(cpu).count();
  volatile std::uint64_t sink = 0;
  while (InspectionBudget::ThreadCpuNs() < until) sink = sink + 1;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Holds the lane with a turn whose work waits until Release().
class Holder {
 public:
  explicit Holder(InspectionBudget& budget) {
    thread_ = std::thread([this, &budget] {
      ASSERT_TRUE(budget
                      .Run(kAdmin, kStay,
                           [this] {
                             started_.set_value();
                             release_.get_future().wait();
                           })
                      .ok());
    });
    started_.get_future().wait();
  }
  void Release() {
    release_.set_value();
    thread_.join();
  }

 private:
  std::promise<void> started_;
  std::promise<void> release_;
  std::thread thread_;
};

TEST(InspectionBudgetTest, OneTurnAtATime) {
  InspectionBudget budget;
  Holder holder(budget);
  std::atomic<bool> second_ran{false};
  std::thread other([&] {
    ASSERT_TRUE(budget.Run(kAdmin, kStay, [&] { second_ran = true; }).ok());
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(second_ran.load());
  holder.Release();
  other.join();
  EXPECT_TRUE(second_ran.load());
}

TEST(InspectionBudgetTest, EveryTurnRunsOnTheBudgetsOwnThread) {
  InspectionBudget budget;
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  std::set<std::thread::id> callers;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        callers.insert(std::this_thread::get_id());
      }
      ASSERT_TRUE(budget
                      .Run(kAdmin, kStay,
                           [&] {
                             std::lock_guard<std::mutex> lock(mu);
                             ran_on.insert(std::this_thread::get_id());
                           })
                      .ok());
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(callers.count(*ran_on.begin()), 0u);
}

TEST(InspectionBudgetTest, AdminsGoBeforeReadOnlyCallersWaitingLonger) {
  InspectionBudget budget;
  Holder holder(budget);
  std::mutex order_mu;
  std::vector<char> order;
  auto caller = [&](bool admin, char tag) {
    ASSERT_TRUE(budget
                    .Run(admin, kStay,
                         [&] {
                           std::lock_guard<std::mutex> lock(order_mu);
                           order.push_back(tag);
                         })
                    .ok());
  };
  std::thread read_only(caller, kReadOnly, 'r');
  std::this_thread::sleep_for(
      milliseconds(100));  // The read-only caller waits first.
  std::thread admin(caller, kAdmin, 'a');
  std::this_thread::sleep_for(milliseconds(100));
  holder.Release();
  read_only.join();
  admin.join();
  EXPECT_EQ(order, (std::vector<char>{'a', 'r'}));
}

// A turn that used 50 ms of a 10 ms burst at a 10% share leaves its
// bucket 40 ms short, which takes 400 ms to earn back.
TEST(InspectionBudgetTest, ReadOnlyCallersWaitUntilTheirShareIsBack) {
  InspectionBudget budget(
      {.read_only_cpu_share = 0.10, .read_only_burst = milliseconds(10)});
  ASSERT_TRUE(
      budget.Run(kReadOnly, kStay, [] { Burn(milliseconds(50)); }).ok());
  // The admin's bucket is its own.
  auto start = Clock::now();
  ASSERT_TRUE(budget.Run(kAdmin, kStay, [] {}).ok());
  EXPECT_LT(SecondsSince(start), 0.1);
  start = Clock::now();
  ASSERT_TRUE(budget.Run(kReadOnly, kStay, [] {}).ok());
  const double waited = SecondsSince(start);
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 2.0);
  EXPECT_GT(budget.throttled_ns(), 300'000'000u);
  EXPECT_EQ(budget.refused(), 0u);
}

TEST(InspectionBudgetTest, AdminsWaitForTheirOwnShareAndAreNeverRefused) {
  InspectionBudget budget({.admin_cpu_share = 0.10,
                           .admin_burst = milliseconds(10),
                           .max_wait = milliseconds(100)});
  ASSERT_TRUE(budget.Run(kAdmin, kStay, [] { Burn(milliseconds(50)); }).ok());
  // Read-only callers still have theirs.
  auto start = Clock::now();
  ASSERT_TRUE(budget.Run(kReadOnly, kStay, [] {}).ok());
  EXPECT_LT(SecondsSince(start), 0.1);
  // Past max_wait, and still served.
  start = Clock::now();
  ASSERT_TRUE(budget.Run(kAdmin, kStay, [] {}).ok());
  EXPECT_GT(SecondsSince(start), 0.3);
  EXPECT_EQ(budget.refused(), 0u);
}

TEST(InspectionBudgetTest, ReadOnlyCpuStaysWithinItsShareUnderContention) {
  // Four read-only callers that each want 20 ms per turn, for 1 s: at a
  // 10% share and 20 ms of burst they get about 100 ms + 20 ms, not the
  // 1000 ms they would take unchecked.
  InspectionBudget budget({.read_only_cpu_share = 0.10,
                           .read_only_burst = milliseconds(20),
                           .max_wait = milliseconds(10'000)});
  std::atomic<int> turns{0};
  const auto stop = Clock::now() + milliseconds(1000);
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      while (Clock::now() < stop) {
        const absl::Status s = budget.Run(
            kReadOnly, [&] { return Clock::now() >= stop; },
            [&] {
              Burn(milliseconds(20));
              ++turns;
            });
        if (!s.ok()) break;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  // 120 ms of budget, and a turn that may start just before the end.
  EXPECT_LE(turns.load(), 8);
  EXPECT_GE(turns.load(), 3);
}

TEST(InspectionBudgetTest, AReadOnlyCallerThatWaitsTooLongIsRefused) {
  InspectionBudget budget({.read_only_cpu_share = 0.001,
                           .read_only_burst = milliseconds(1),
                           .max_wait = milliseconds(200)});
  ASSERT_TRUE(
      budget.Run(kReadOnly, kStay, [] { Burn(milliseconds(20)); }).ok());
  const auto start = Clock::now();
  bool ran = false;
  const absl::Status s = budget.Run(kReadOnly, kStay, [&] { ran = true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_FALSE(ran);
  EXPECT_GE(SecondsSince(start), 0.19);
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(budget.refused(), 1u);
}

TEST(InspectionBudgetTest, ACallerWhoseClientLeftGivesUpItsPlace) {
  InspectionBudget budget;
  Holder holder(budget);
  std::atomic<bool> gone{false};
  auto waiter = std::async(std::launch::async, [&] {
    return budget.Run(
        kAdmin, [&] { return gone.load(); }, [] {});
  });
  std::this_thread::sleep_for(milliseconds(50));
  gone = true;
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(2)),
            std::future_status::ready);
  EXPECT_EQ(waiter.get().code(), absl::StatusCode::kCancelled);
  // The admin that left does not keep read-only callers out.
  holder.Release();
  EXPECT_TRUE(budget.Run(kReadOnly, kStay, [] {}).ok());
}

}  // namespace
}  // namespace mt::control
