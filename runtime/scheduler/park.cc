#include "runtime/scheduler/park.h"

namespace mt::runtime::scheduler {

bool Parker::Park(std::optional<std::chrono::nanoseconds> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kNotified) {
    state_ = State::kEmpty;
    return false;
  }
  if (shared_->workers_drive && shared_->driver != nullptr &&
      shared_->lock.try_lock()) {
    state_ = State::kParkedDriver;
    driving_.store(true, std::memory_order_relaxed);
    lock.unlock();
    // An Unpark from here on writes the eventfd, so epoll_wait returns
    // even if it comes before we are inside it.
    shared_->driver->Park(timeout);
    driving_.store(false, std::memory_order_relaxed);
    shared_->lock.unlock();
    lock.lock();
    state_ = State::kEmpty;
    return true;
  }
  state_ = State::kParkedCondvar;
  auto notified = [this] { return state_ == State::kNotified; };
  if (timeout) {
    cv_.wait_for(lock, *timeout, notified);
  } else {
    cv_.wait(lock, notified);
  }
  state_ = State::kEmpty;
  return false;
}

void Parker::Unpark() {
  std::lock_guard<std::mutex> lock(mu_);
  switch (state_) {
    case State::kEmpty:
      state_ = State::kNotified;
      break;
    case State::kParkedCondvar:
      state_ = State::kNotified;
      cv_.notify_one();
      break;
    case State::kParkedDriver:
      shared_->driver->Unpark();
      break;
    case State::kNotified:
      break;
  }
}

bool Parker::PollDriver() {
  if (!shared_->workers_drive || shared_->driver == nullptr ||
      !shared_->lock.try_lock()) {
    return false;
  }
  shared_->driver->Park(std::chrono::nanoseconds(0));
  shared_->lock.unlock();
  return true;
}

}  // namespace mt::runtime::scheduler
