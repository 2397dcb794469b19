#include "runtime/task/task.h"

#include <cstdint>
#include <cstdlib>

#include "runtime/task/blocked_sequence.h"

namespace mt::runtime::task {
namespace {

// Ids are handed out in per-thread blocks so spawning from many threads
// does not contend on one counter.
struct UnitIds;
std::uint64_t NextId() { return NextInSequence<UnitIds, 1024>(); }

}  // namespace

Task::Task(bool scheduled)
    : state_(scheduled ? State::kNewScheduled : State::kRefOne), id_(NextId()) {
  if (scheduled) MarkQueued();
}

Task::~Task() {
  if (executor_retained_) executor_.load(std::memory_order_relaxed)->Release();
}

void Task::Wake(ScheduleKind kind) {
  if (state_.TransitionToScheduled() == State::WakeAction::kSubmit) {
    MarkQueued();
    executor()->Schedule(this, kind);
  } else if (Executor* executor = this->executor()) {
    executor->OnWakeWithoutQueueing(this, kind);
  }
}

void Task::Cancel() {
  if (state_.Cancel() == State::WakeAction::kSubmit) {
    executor()->Schedule(this, ScheduleKind::kWake);
  }
}

namespace {

void Complete(Task* task) {
  // Counted before the reference drops: after it, the task may be gone.
  if (task->tracked()) task->executor()->OnComplete(task);
  if (task->state().TransitionToCompleteAndRelease()) delete task;
}

}  // namespace

void RunTask(Task* task) {
  if (task->state().TransitionToRunning() == State::RunAction::kPoll) {
    if (task->Poll()) {
      Complete(task);
      return;
    }
    {
      switch (task->state().TransitionToIdle()) {
        case State::IdleAction::kIdle:
          task->Unref();
          return;
        case State::IdleAction::kReschedule:
          // The queue's reference travels with it.
          task->MarkQueued();
          task->executor()->Schedule(task, ScheduleKind::kYield);
          return;
        case State::IdleAction::kCancel:
          break;  // Fall through to the cancel path below.
      }
    }
  }
  // Cancelled before or during the run.
  task->OnCancel();
  Complete(task);
}

namespace {

// A bounded per-thread cache of FnTask-sized blocks. A block freed on
// another thread than the one that allocated it simply joins that thread's
// cache; past the bound, blocks go back to the global allocator.
struct FnTaskCache {
  static constexpr int kMax = 512;
  void* blocks[kMax];
  int count = 0;  // -1 once destroyed: late frees go to the allocator.
  ~FnTaskCache() {
    while (count > 0) ::operator delete(blocks[--count]);
    count = -1;
  }
};
thread_local FnTaskCache fn_task_cache;

}  // namespace

void* FnTask::operator new(std::size_t size) {
  if (size == sizeof(FnTask) && fn_task_cache.count > 0) {
    return fn_task_cache.blocks[--fn_task_cache.count];
  }
  return ::operator new(size);
}

void FnTask::operator delete(void* p, std::size_t size) {
  if (size == sizeof(FnTask) && fn_task_cache.count >= 0 &&
      fn_task_cache.count < FnTaskCache::kMax) {
    fn_task_cache.blocks[fn_task_cache.count++] = p;
    return;
  }
  ::operator delete(p);
}

bool FnTask::Poll() {
  std::move(fn_)();
  fn_ = nullptr;
  return true;
}

void FnTask::OnCancel() { fn_ = nullptr; }

}  // namespace mt::runtime::task
