#include "runtime/scheduler/injector.h"

#include <algorithm>

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

void Injector::PushFront(const std::vector<task::Task*>& tasks) {
  if (tasks.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.insert(queue_.begin(), tasks.begin(), tasks.end());
  len_.store(queue_.size(), std::memory_order_release);
}

task::Task* Injector::PopOutside(const std::vector<std::uintptr_t>& held,
                                 std::size_t scan_limit) {
  if (IsEmpty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t n = std::min(scan_limit, queue_.size());
  for (std::size_t i = 0; i < n; ++i) {
    task::Task* task = queue_[i];
    const std::uintptr_t domain = task->domain();
    if (domain != 0 && std::find(held.begin(), held.end(), domain) != held.end()) {
      continue;
    }
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    len_.store(queue_.size(), std::memory_order_release);
    return task;
  }
  return nullptr;
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
