#include "runtime/scheduler/strand.h"

#include <utility>

namespace mt::runtime::scheduler {
namespace {

thread_local Strand* current_strand = nullptr;

// Runs the cancel path of a unit the caller owns the queue's reference of.
void CancelQueued(task::Task* task) {
  task->state().Cancel();
  task::RunTask(task);
}

}  // namespace

Strand::Strand() : Task(/*scheduled=*/false) {}

Strand* Strand::Create(task::Executor* target) {
  auto* strand = new Strand();
  strand->set_executor(target);
  return strand;
}

Strand* Strand::Current() { return current_strand; }

void Strand::Schedule(task::Task* task, task::ScheduleKind kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      queue_.push_back(task);
      task = nullptr;
    }
  }
  if (task != nullptr) {
    CancelQueued(task);
    return;
  }
  // One wake per unit queued. While the strand runs, the state word
  // remembers it and the strand is queued again once this poll ends, so a
  // unit pushed after the poll looked at the queue for the last time is
  // never stranded.
  Wake(kind == task::ScheduleKind::kYield ? task::ScheduleKind::kWake : kind);
}

void Strand::OnComplete(task::Task* task) { executor()->OnComplete(task); }

task::Task* Strand::Pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return nullptr;
  task::Task* task = queue_.front();
  queue_.pop_front();
  return task;
}

bool Strand::Poll() {
  Strand* outer = std::exchange(current_strand, this);
  int ran = 0;
  for (; ran < kBudget; ++ran) {
    task::Task* task = Pop();
    if (task == nullptr) break;
    // A unit that wakes itself while it runs is pushed back on this queue
    // (Schedule above), behind whatever else is waiting here.
    task::RunTask(task);
  }
  current_strand = outer;
  if (ran == kBudget) {
    // Units queued before this poll began woke a strand that was already
    // scheduled, which the state word does not remember: ask again, and
    // let other work run first.
    bool more;
    {
      std::lock_guard<std::mutex> lock(mu_);
      more = !queue_.empty();
    }
    if (more) Wake(task::ScheduleKind::kYield);
  }
  return false;  // A strand lives as long as references to it do.
}

void Strand::OnCancel() {
  std::deque<task::Task*> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    queued.swap(queue_);
  }
  for (task::Task* task : queued) CancelQueued(task);
}

std::size_t Strand::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace mt::runtime::scheduler
