#include "runtime/scheduler/injector.h"

namespace mt::runtime::scheduler {

void Injector::Push(task::Task* task) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(task);
  len_.store(queue_.size(), std::memory_order_release);
}

void Injector::PushBatch(const std::vector<task::Task*>& tasks) {
  if (tasks.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.insert(queue_.end(), tasks.begin(), tasks.end());
  len_.store(queue_.size(), std::memory_order_release);
}

task::Task* Injector::Pop() {
  if (IsEmpty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return nullptr;
  task::Task* task = queue_.front();
  queue_.pop_front();
  len_.store(queue_.size(), std::memory_order_release);
  return task;
}

std::size_t Injector::PopBatch(std::size_t max, std::vector<task::Task*>& out) {
  if (max == 0 || IsEmpty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t n = std::min(max, queue_.size());
  out.insert(out.end(), queue_.begin(), queue_.begin() + n);
  queue_.erase(queue_.begin(), queue_.begin() + n);
  len_.store(queue_.size(), std::memory_order_release);
  return n;
}

}  // namespace mt::runtime::scheduler
