#include "runtime/scheduler/injector.h"

#include <utility>

namespace mt::runtime::scheduler {

bool Injector::Push(Unit& unit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  queue_.push_back(std::move(unit));
  ready_.notify_one();
  return true;
}

std::optional<Unit> Injector::TryPop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  Unit unit = std::move(queue_.front());
  queue_.pop_front();
  return unit;
}

void Injector::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  ready_.notify_all();
}

bool Injector::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::size_t Injector::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace mt::runtime::scheduler
