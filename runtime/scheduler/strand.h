#ifndef MT_RUNTIME_SCHEDULER_STRAND_H_
#define MT_RUNTIME_SCHEDULER_STRAND_H_

#include <cstddef>
#include <deque>
#include <mutex>

#include "runtime/task/task.h"

namespace mt::runtime::scheduler {

// A serial executor on top of another one (Boost.Asio's strand): units
// bound to a strand run one at a time, in the order they were queued, each
// happening-after the previous, on whichever worker runs the strand at the
// moment; different strands run in parallel.
//
// A network connection is one strand: its protocol callbacks and the tasks
// they create share it, so library code that keeps per-connection state
// without locks (a parser feeding a buffer that a handler task drains) sees
// what it would see on a one-thread loop, while connections still spread
// over every worker.
//
// The strand is itself a unit of `target`: binding a unit to it
// (Task::set_executor) makes every wake of that unit go through
// Schedule(), which appends it to the strand's queue and wakes the strand.
// The strand runs at most kBudget units per poll, then yields its worker.
//
// Lifetime: reference counted through its unit state; each bound unit holds
// one reference (Retain/Release), the creator another.
class Strand final : public task::Task, public task::Executor {
 public:
  // Units a strand runs per poll before going to the back of a queue.
  static constexpr int kBudget = 64;

  // A new idle strand on `target`, with one reference owned by the caller
  // (drop it with Unref()).
  static Strand* Create(task::Executor* target);

  // The strand whose unit the calling thread is running, or nullptr.
  static Strand* Current();

  // task::Executor. Takes over the queue's reference to `task` (in the
  // kScheduled state). Any thread.
  void Schedule(task::Task* task, task::ScheduleKind kind) override;
  void OnComplete(task::Task* task) override;
  bool Retain() override {
    Ref();
    return true;
  }
  void Release() override { Unref(); }

  // task::Task: runs queued units (the strand's worker side).
  bool Poll() override;
  // The target stopped scheduling (runtime shutdown): queued units and any
  // scheduled later take their cancel path instead of running.
  void OnCancel() override;

  std::size_t queued();

 private:
  Strand();
  task::Task* Pop();

  std::mutex mu_;
  std::deque<task::Task*> queue_;  // Guarded by mu_; one reference each.
  bool cancelled_ = false;         // Guarded by mu_.
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_STRAND_H_
