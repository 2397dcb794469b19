#include "runtime/scheduler/idle.h"

#include <algorithm>
#include <iterator>

namespace mt::runtime::scheduler {

Idle::Idle(std::size_t num_workers)
    : state_(kUnparkedOne * num_workers), num_workers_(num_workers) {}

std::size_t Idle::num_searching() const {
  return state_.load(std::memory_order_acquire) & kSearchingMask;
}

std::size_t Idle::num_unparked() const {
  return state_.load(std::memory_order_acquire) >> 32;
}

bool Idle::NotifyShouldWakeup(bool unthrottled) const {
  const std::uint64_t s = state_.load(std::memory_order_seq_cst);
  if (!unthrottled && (s & kSearchingMask) != 0) return false;
  return (s >> 32) < num_workers();
}

std::optional<std::size_t> Idle::WorkerToNotify(
    bool unthrottled, std::optional<std::size_t> exclude) {
  // The fence orders the caller's queue push before this check; the
  // matching fence is in TransitionWorkerToParked's lock + recheck.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!NotifyShouldWakeup(unthrottled)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (!NotifyShouldWakeup(unthrottled)) return std::nullopt;
  // The most recent sleeper is the likeliest to have a warm cache.
  for (auto it = sleepers_.rbegin(); it != sleepers_.rend(); ++it) {
    if (exclude && *it == *exclude) continue;
    const std::size_t worker = *it;
    sleepers_.erase(std::next(it).base());
    state_.fetch_add(kUnparkedOne + 1, std::memory_order_seq_cst);
    return worker;
  }
  return std::nullopt;
}

bool Idle::TransitionWorkerToSearching() {
  const std::uint64_t s = state_.load(std::memory_order_seq_cst);
  if (2 * (s & kSearchingMask) >= num_workers()) return false;
  state_.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

bool Idle::TransitionWorkerFromSearching() {
  const std::uint64_t prev = state_.fetch_sub(1, std::memory_order_seq_cst);
  return (prev & kSearchingMask) == 1;
}

bool Idle::TransitionWorkerToParked(std::size_t worker, bool is_searching) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t dec = kUnparkedOne + (is_searching ? 1 : 0);
  const std::uint64_t prev = state_.fetch_sub(dec, std::memory_order_seq_cst);
  sleepers_.push_back(worker);
  return is_searching && (prev & kSearchingMask) == 1;
}

bool Idle::UnparkWorkerById(std::size_t worker) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(sleepers_.begin(), sleepers_.end(), worker);
  if (it == sleepers_.end()) return false;
  sleepers_.erase(it);
  state_.fetch_add(kUnparkedOne, std::memory_order_seq_cst);
  return true;
}

bool Idle::IsParked(std::size_t worker) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(sleepers_.begin(), sleepers_.end(), worker) !=
         sleepers_.end();
}

void Idle::AddWorker() {
  std::lock_guard<std::mutex> lock(mu_);
  state_.fetch_add(kUnparkedOne, std::memory_order_seq_cst);
  num_workers_.fetch_add(1, std::memory_order_seq_cst);
}

void Idle::RemoveWorker() {
  std::lock_guard<std::mutex> lock(mu_);
  state_.fetch_sub(kUnparkedOne, std::memory_order_seq_cst);
  num_workers_.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace mt::runtime::scheduler
