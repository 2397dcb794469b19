#ifndef MT_RUNTIME_TESTING_TEST_TASKS_H_
#define MT_RUNTIME_TESTING_TEST_TASKS_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "runtime/task/task.h"

namespace mt::runtime::testing {

// An executor that only records what was scheduled; tests pop and run.
class QueueExecutor final : public task::Executor {
 public:
  void Schedule(task::Task* task, task::ScheduleKind kind) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(task);
    last_kind_ = kind;
  }
  task::Task* Pop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return nullptr;
    task::Task* t = queue_.front();
    queue_.pop_front();
    return t;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }
  task::ScheduleKind last_kind() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_kind_;
  }
  // Runs everything queued (including what runs schedule) until empty.
  void RunAll() {
    while (task::Task* t = Pop()) task::RunTask(t);
  }

 private:
  std::mutex mu_;
  std::deque<task::Task*> queue_;
  task::ScheduleKind last_kind_ = task::ScheduleKind::kSpawn;
};

// A task that counts its polls and destruction; Poll returns `finish_after`
// polls' worth of "not finished" first. Never deleted by tests directly.
class CountingTask final : public task::Task {
 public:
  CountingTask(std::atomic<int>* polls, std::atomic<int>* destroyed,
               int finish_after = 1, bool scheduled = false)
      : Task(scheduled),
        polls_(polls),
        destroyed_(destroyed),
        finish_after_(finish_after) {}
  ~CountingTask() override {
    if (destroyed_ != nullptr) destroyed_->fetch_add(1);
  }
  bool Poll() override {
    const int n = polls_->fetch_add(1) + 1;
    return finish_after_ > 0 && n >= finish_after_;
  }
  void OnCancel() override { cancelled.store(true); }
  std::atomic<bool> cancelled{false};

 private:
  std::atomic<int>* polls_;
  std::atomic<int>* destroyed_;
  const int finish_after_;
};

// A task whose step is a closure: `poll(self)` returns true when finished.
// Lets a test write a little state machine inline.
class LambdaTask final : public task::Task {
 public:
  using PollFn = std::function<bool(LambdaTask*)>;
  explicit LambdaTask(PollFn poll, bool scheduled = true,
                      std::function<void()> on_cancel = nullptr)
      : Task(scheduled), poll_(std::move(poll)), on_cancel_(std::move(on_cancel)) {}
  bool Poll() override { return poll_(this); }
  void OnCancel() override {
    if (on_cancel_) on_cancel_();
  }

 private:
  PollFn poll_;
  std::function<void()> on_cancel_;
};

// Polls `pred` every millisecond for up to `timeout`: every wait in a test
// is bounded.
template <typename Pred>
bool Eventually(Pred pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace mt::runtime::testing

#endif  // MT_RUNTIME_TESTING_TEST_TASKS_H_
