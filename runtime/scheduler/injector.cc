#include "runtime/scheduler/injector.h"

#include <utility>

namespace mt::runtime::scheduler {

bool Injector::Push(Unit& unit) {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  queue_.push_back(std::move(unit));
  return true;
}

std::optional<Unit> Injector::TryPop() {
  absl::MutexLock lock(&mu_);
  if (queue_.empty()) return std::nullopt;
  Unit unit = std::move(queue_.front());
  queue_.pop_front();
  return unit;
}

void Injector::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool Injector::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

std::size_t Injector::size() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace mt::runtime::scheduler
