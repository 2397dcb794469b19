#include "runtime/task/state.h"

#include <atomic>
#include <cassert>
#include <cstdlib>
#include <thread>

namespace mt::runtime::task {
namespace {

void YieldToOthers() { std::this_thread::yield(); }

std::atomic<void (*)()> inspection_wait{YieldToOthers};

}  // namespace

void State::SetInspectionWait(void (*wait)()) {
  inspection_wait.store(wait != nullptr ? wait : YieldToOthers, std::memory_order_release);
}

State::WakeAction State::TransitionToScheduled() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    std::uint64_t next;
    WakeAction action;
    if (cur & (kComplete | kScheduled)) {
      return WakeAction::kNone;
    } else if (cur & kRunning) {
      if (cur & kNotified) return WakeAction::kNone;
      next = cur | kNotified;
      action = WakeAction::kNone;
    } else {
      next = (cur | kScheduled) + kRefOne;
      action = WakeAction::kSubmit;
    }
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return action;
    }
  }
}

State::RunAction State::TransitionToRunning() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    assert((cur & kScheduled) && !(cur & (kRunning | kComplete)));
    if (cur & kInspected) {
      // Rare (a debugger's snapshot) and short: wait rather than park.
      inspection_wait.load(std::memory_order_acquire)();
      cur = word_.load(std::memory_order_acquire);
      continue;
    }
    const std::uint64_t next = (cur & ~kScheduled) | kRunning;
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return (cur & kCancelled) ? RunAction::kCancel : RunAction::kPoll;
    }
  }
}

State::IdleAction State::TransitionToIdle() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    assert(cur & kRunning);
    if (cur & kCancelled) return IdleAction::kCancel;  // Stays running.
    std::uint64_t next;
    IdleAction action;
    if (cur & kNotified) {
      next = (cur & ~(kRunning | kNotified)) | kScheduled;
      action = IdleAction::kReschedule;
    } else {
      next = cur & ~kRunning;
      action = IdleAction::kIdle;
    }
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return action;
    }
  }
}

void State::TransitionToComplete() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    assert(cur & kRunning);
    const std::uint64_t next =
        (cur & ~(kRunning | kNotified | kScheduled)) | kComplete;
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return;
    }
  }
}

bool State::TransitionToCompleteAndRelease() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    assert(cur & kRunning);
    if (RefCount(cur) == 0) std::abort();
    const std::uint64_t next =
        ((cur & ~(kRunning | kNotified | kScheduled)) | kComplete) - kRefOne;
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return RefCount(cur) == 1;
    }
  }
}

State::WakeAction State::Cancel() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    if (cur & (kComplete | kCancelled)) return WakeAction::kNone;
    std::uint64_t next = cur | kCancelled;
    WakeAction action = WakeAction::kNone;
    if (!(cur & (kRunning | kScheduled))) {
      next = (next | kScheduled) + kRefOne;
      action = WakeAction::kSubmit;
    }
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return action;
    }
  }
}

bool State::TryBeginInspection() {
  std::uint64_t cur = word_.load(std::memory_order_acquire);
  for (;;) {
    if (cur & (kRunning | kComplete | kInspected)) return false;
    if (word_.compare_exchange_weak(cur, cur | kInspected, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      return true;
    }
  }
}

void State::EndInspection() {
  const std::uint64_t prev = word_.fetch_and(~kInspected, std::memory_order_release);
  assert(prev & kInspected);
  (void)prev;
}

void State::RefInc() { word_.fetch_add(kRefOne, std::memory_order_relaxed); }

bool State::RefDec() {
  const std::uint64_t prev =
      word_.fetch_sub(kRefOne, std::memory_order_acq_rel);
  if (RefCount(prev) == 0) std::abort();  // Underflow: a double release.
  return RefCount(prev) == 1;
}

}  // namespace mt::runtime::task
