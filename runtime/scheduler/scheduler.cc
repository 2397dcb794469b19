#include "runtime/scheduler/scheduler.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/scheduler/strand.h"

namespace mt::runtime::scheduler {
namespace {

void SetPhase(metrics::WorkerMetrics& m, metrics::WorkerPhase phase) {
  m.phase.store(phase, std::memory_order_relaxed);
}

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The state a worker thread keeps to itself: only its own thread touches
// it, through the thread-local pointer below.
class Scheduler::Worker {
 public:
  Worker(Scheduler* scheduler, std::size_t index, WorkerSlot* slot)
      : scheduler(scheduler),
        index(index),
        slot(slot),
        rng(static_cast<std::uint32_t>(index * 2654435761u + 1)) {}

  void Run();

  Scheduler* const scheduler;
  const std::size_t index;
  WorkerSlot* const slot;
  // The unit most recently woken by this worker: runs next, ahead of the
  // queue, because whatever woke it probably left its data in our cache.
  task::Task* lifo = nullptr;
  bool searching = false;
  // True while the thread is inside Park (possibly dispatching reactor
  // events): wakes then go to the queue, not the LIFO slot.
  bool parked = false;
  // Ticks left until the next fairness look at the injector and the next
  // reactor poll (countdowns: no division on the hot path).
  std::uint32_t until_global = 0;
  // Units a lone worker took from the injector in a row (see NextTask).
  std::uint32_t injector_streak = 0;
  std::uint32_t until_event = 0;
  // A lone worker's units left in the current round (see Run).
  std::uint32_t round_left = 0;
  std::uint32_t rng;

 private:
  std::uint32_t NextRandom() {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
  }
  task::Task* NextTask();
  task::Task* StealWork();
  // Looks again for idle_spin_us (see SchedulerOptions), as a searcher.
  task::Task* SpinForWork();
  void RunWithLifo(task::Task* task);
  void RunOne(task::Task* task);
  void BeginBusyPeriod();
  void EndBusyPeriod();
  void LeaveSearching();
  void Park();
  void Maintenance();
  void LoneWorkerRound();
  void NotifyForReactorWork();
  void Retire();
  void DrainCancelled();
  bool ShouldExit() const;
};

namespace {
thread_local Scheduler::Worker* current_worker = nullptr;
}  // namespace

// The scheduler whose stand-in worker this thread is (stand_in.cc).
thread_local const Scheduler* stand_in_of = nullptr;

Scheduler::Scheduler(SchedulerOptions options, WorkerHooks hooks,
                     SharedDriver* driver)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      driver_(driver),
      idle_(0),
      slots_(new std::atomic<WorkerSlot*>[options_.max_workers]),
      stand_in_parker_(driver) {
  for (std::size_t i = 0; i < options_.max_workers; ++i) {
    slots_[i].store(nullptr, std::memory_order_relaxed);
  }
}

Scheduler::~Scheduler() {
  Close();
  Join();
  for (std::size_t i = 0; i < options_.max_workers; ++i) {
    delete slots_[i].load(std::memory_order_relaxed);
  }
}

absl::Status Scheduler::Start(std::size_t workers) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (started_)
    return absl::FailedPreconditionError("scheduler already started");
  if (closed()) return absl::FailedPreconditionError("scheduler is closed");
  if (workers == 0 || workers > options_.max_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker count must be in [1, ", options_.max_workers,
                     "], got ", workers));
  }
  started_ = true;
  target_workers_.store(workers, std::memory_order_release);
  for (std::size_t i = 0; i < workers; ++i) {
    absl::Status s = StartWorkerLocked(i);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::StartWorkerLocked(std::size_t index) {
  WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  if (slot == nullptr) {
    slot = new WorkerSlot(driver_);
    slots_[index].store(slot, std::memory_order_release);
  }
  if (slot->thread.joinable()) slot->thread.join();  // A retired worker.
  if (index + 1 > slot_high_water_.load(std::memory_order_relaxed)) {
    slot_high_water_.store(index + 1, std::memory_order_release);
  }
  idle_.AddWorker();
  slot->status.store(SlotStatus::kRunning, std::memory_order_release);
  live_workers_.fetch_add(1, std::memory_order_acq_rel);
  try {
    slot->thread = std::thread([this, index] { WorkerMain(index); });
  } catch (const std::system_error& e) {
    // No thread: undo the accounting, so nothing waits for this worker.
    live_workers_.fetch_sub(1, std::memory_order_acq_rel);
    slot->status.store(SlotStatus::kExited, std::memory_order_release);
    idle_.RemoveWorker();
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start worker thread ", index, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Spawn(task::Task* task) {
  if (closed()) {
    task->set_executor(this);
    CancelInline(task);
    return absl::FailedPreconditionError("runtime is shutting down");
  }
  task->set_executor(this);
  task->set_tracked();
  Worker* w = current_worker;
  if (w != nullptr && w->scheduler == this) {
    metrics::OwnerAdd(w->slot->spawned, 1);
  } else {
    external_spawned_.fetch_add(1, std::memory_order_relaxed);
  }
  Schedule(task, task::ScheduleKind::kSpawn);
  return absl::OkStatus();
}

absl::Status Scheduler::Spawn(absl::AnyInvocable<void() &&> fn) {
  return Spawn(new task::FnTask(std::move(fn)));
}

void Scheduler::OnComplete(task::Task*) {
  Worker* w = current_worker;
  if (w != nullptr && w->scheduler == this) {
    metrics::OwnerAdd(w->slot->completed, 1);
  } else {
    external_completed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Scheduler::CancelInline(task::Task* task) {
  // The task is scheduled and we own the queue's reference: mark it
  // cancelled so RunTask takes the cancel path, never Poll.
  task->state().Cancel();
  task::RunTask(task);
}

void Scheduler::Schedule(task::Task* task, task::ScheduleKind kind) {
  if (closed()) {
    CancelInline(task);
    return;
  }
  // For a plain unit woken by a strand's unit (a strand woken was noted in
  // Strand::Schedule, held or not; noting it again stores the same count).
  Strand::NoteWake(task);
  if (Strand::HoldBehindHeldWakes(task, this, kind)) return;
  Worker* w = current_worker;
  if (w != nullptr && w->scheduler == this &&
      kind != task::ScheduleKind::kRemote &&
      w->slot->status.load(std::memory_order_relaxed) == SlotStatus::kRunning) {
    const bool lone = idle_.num_workers() <= 1;
    if (kind == task::ScheduleKind::kWake && !w->parked &&
        !(lone && options_.lone_worker_fifo)) {
      task::Task* previous = std::exchange(w->lifo, task);
      w->slot->metrics.lifo_occupied.store(true, std::memory_order_relaxed);
      if (previous != nullptr) PushLocal(*w->slot, previous);
    } else {
      PushLocal(*w->slot, task);
    }
    // A lone worker has nobody to wake (it is the caller): skip the fence in
    // WorkerToNotify. A worker added by a resize starts unparked and looks
    // at every queue before it parks.
    if (lone) return;
    // Reactor wakes delivered while this worker drives the reactor: it will
    // run them itself when the turn ends and wakes helpers for the rest then
    // (Worker::NotifyForReactorWork), one futex wake per batch rather than
    // per event.
    if (w->parked) return;
    if (!w->searching &&
        (w->lifo != nullptr ? 1u : 0u) + w->slot->queue.Len() > 1) {
      NotifyParked(/*unthrottled=*/false);
    }
    return;
  }
  injector_.Push(task);
  NotifyParked(kind == task::ScheduleKind::kIo);
  if (stand_in_running_.load(std::memory_order_acquire))
    stand_in_parker_.Unpark();
  // Join may have drained the injector for the last time already.
  if (joined_.load(std::memory_order_seq_cst)) DrainInjectorCancelled();
}

bool Scheduler::KeepsRounds() const {
  return options_.lone_worker_fifo && idle_.num_workers() <= 1;
}

void Scheduler::PushLocal(WorkerSlot& slot, task::Task* task) {
  if (slot.queue.TryPush(task)) return;
  std::vector<task::Task*> batch;
  batch.reserve(LocalQueue::kCapacity / 2 + 1);
  if (slot.queue.TakeHalfForOverflow(batch)) {
    metrics::OwnerAdd(slot.metrics.overflows, 1);
    // The just-scheduled task goes last: older work first.
    batch.push_back(task);
    injector_.PushBatch(batch);
  } else {
    injector_.Push(task);
  }
}

bool Scheduler::NotifyParked(bool unthrottled,
                             std::optional<std::size_t> exclude) {
  if (std::optional<std::size_t> worker =
          idle_.WorkerToNotify(unthrottled, exclude)) {
    WorkerSlot* slot = slots_[*worker].load(std::memory_order_acquire);
    slot->parker.Unpark();
    return true;
  }
  return false;
}

bool Scheduler::AnyLocalWork(std::optional<std::size_t> exclude) const {
  const std::size_t n = slot_count();
  for (std::size_t i = 0; i < n; ++i) {
    if (exclude && *exclude == i) continue;
    const WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
    if (slot != nullptr && !slot->queue.IsEmpty()) return true;
  }
  return false;
}

void Scheduler::NotifyIfWorkPending(std::optional<std::size_t> exclude) {
  if (!injector_.IsEmpty() || AnyLocalWork(exclude)) {
    NotifyParked(/*unthrottled=*/false, exclude);
  }
}

void Scheduler::UnparkAll() {
  const std::size_t n = slot_count();
  for (std::size_t i = 0; i < n; ++i) {
    if (WorkerSlot* slot = slots_[i].load(std::memory_order_acquire)) {
      slot->parker.Unpark();
    }
  }
}

void Scheduler::RerunParkHooks() {
  const std::size_t n = slot_count();
  for (std::size_t i = 0; i < n; ++i) {
    if (WorkerSlot* slot = slots_[i].load(std::memory_order_acquire)) {
      // Release: pairs with the worker's exchange, so what the caller did
      // before (closing a loop) is seen by the hooks.
      slot->rerun_park_hooks.store(true, std::memory_order_release);
      slot->parker.Unpark();
    }
  }
}

absl::Status Scheduler::Resize(std::size_t workers) {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!started_) return absl::FailedPreconditionError("scheduler not started");
  if (closed()) return absl::FailedPreconditionError("scheduler is closed");
  if (workers == 0 || workers > options_.max_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker count must be in [1, ", options_.max_workers,
                     "], got ", workers));
  }
  target_workers_.store(workers, std::memory_order_release);
  // Count running workers; retiring ones are already on their way out.
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < options_.max_workers; ++i) {
    WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
    if (slot != nullptr &&
        slot->status.load(std::memory_order_acquire) == SlotStatus::kRunning) {
      running.push_back(i);
    }
  }
  if (workers > running.size()) {
    std::size_t needed = workers - running.size();
    for (std::size_t i = 0; i < options_.max_workers && needed > 0; ++i) {
      WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
      const SlotStatus status =
          slot == nullptr ? SlotStatus::kUnused
                          : slot->status.load(std::memory_order_acquire);
      if (status == SlotStatus::kDormant) {
        ReviveWorkerLocked(i);
        --needed;
      } else if (status == SlotStatus::kUnused ||
                 status == SlotStatus::kExited) {
        absl::Status s = StartWorkerLocked(i);
        if (!s.ok()) return s;
        --needed;
      }
    }
  } else {
    // Retire the highest-numbered workers.
    for (std::size_t k = workers; k < running.size(); ++k) {
      WorkerSlot* slot = slots_[running[k]].load(std::memory_order_acquire);
      slot->status.store(SlotStatus::kRetiring, std::memory_order_release);
      slot->parker.Unpark();
    }
  }
  return absl::OkStatus();
}

void Scheduler::ReviveWorkerLocked(std::size_t index) {
  WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  // The same accounting as a new worker's: counted before it runs.
  idle_.AddWorker();
  live_workers_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> lock(slot->dormant_mu);
    slot->status.store(SlotStatus::kRunning, std::memory_order_release);
  }
  slot->dormant_cv.notify_one();
}

void Scheduler::WakeDormant(WorkerSlot& slot) {
  // Under the mutex: a worker between its closed() check and its wait
  // still gets this wake.
  std::lock_guard<std::mutex> lock(slot.dormant_mu);
  slot.dormant_cv.notify_all();
}

void Scheduler::WakeDormant() {
  for (std::size_t i = 0; i < options_.max_workers; ++i) {
    WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
    if (slot != nullptr) WakeDormant(*slot);
  }
}

void Scheduler::Close() {
  if (closed_.exchange(true, std::memory_order_seq_cst)) return;
  WakeDormant();
  UnparkAll();
  stand_in_parker_.Unpark();
  if (driver_ != nullptr && driver_->driver != nullptr)
    driver_->driver->Unpark();
}

void Scheduler::Join() {
  if (IsWorkerThread()) return;  // A thread cannot join itself.
  Close();
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  for (std::size_t i = 0; i < options_.max_workers; ++i) {
    WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
    if (slot == nullptr) continue;
    // Keep waking: a worker may be between its last check and parking.
    while (slot->thread.joinable()) {
      if (slot->status.load(std::memory_order_acquire) == SlotStatus::kExited) {
        slot->thread.join();
        break;
      }
      slot->parker.Unpark();
      WakeDormant(*slot);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  JoinStandIn();
  joined_.store(true, std::memory_order_seq_cst);
  DrainInjectorCancelled();
}

void Scheduler::DrainInjectorCancelled() {
  while (task::Task* t = injector_.Pop()) CancelInline(t);
}

bool Scheduler::IsWorkerThread() const {
  // A stand-in is one too: it must not join the workers it stands in for.
  return (current_worker != nullptr && current_worker->scheduler == this) ||
         stand_in_of == this;
}

int Scheduler::CurrentWorkerIndex() const {
  return current_worker != nullptr && current_worker->scheduler == this
             ? static_cast<int>(current_worker->index)
             : -1;
}

bool Scheduler::SlotActive(std::size_t index) const {
  if (index >= options_.max_workers) return false;
  const WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  if (slot == nullptr) return false;
  const SlotStatus s = slot->status.load(std::memory_order_acquire);
  return s == SlotStatus::kRunning || s == SlotStatus::kRetiring;
}

bool Scheduler::SlotRetiring(std::size_t index) const {
  if (index >= options_.max_workers) return false;
  const WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  return slot != nullptr &&
         slot->status.load(std::memory_order_acquire) == SlotStatus::kRetiring;
}

bool Scheduler::SlotDrivesReactor(std::size_t index) const {
  if (index >= options_.max_workers) return false;
  const WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  return slot != nullptr && slot->parker.driving();
}

const metrics::WorkerMetrics* Scheduler::WorkerMetrics(
    std::size_t index) const {
  if (index >= options_.max_workers) return nullptr;
  const WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  return slot == nullptr ? nullptr : &slot->metrics;
}

metrics::WorkerMetrics* Scheduler::MutableWorkerMetrics(std::size_t index) {
  if (index >= options_.max_workers) return nullptr;
  WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  return slot == nullptr ? nullptr : &slot->metrics;
}

std::uint32_t Scheduler::LocalQueueDepth(std::size_t index) const {
  if (index >= options_.max_workers) return 0;
  const WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  return slot == nullptr ? 0 : slot->queue.Len();
}

std::size_t Scheduler::tasks_in_flight() const {
  std::uint64_t spawned = external_spawned_.load(std::memory_order_acquire);
  std::uint64_t completed = external_completed_.load(std::memory_order_acquire);
  const std::size_t n = slot_count();
  for (std::size_t i = 0; i < n; ++i) {
    if (const WorkerSlot* slot = slots_[i].load(std::memory_order_acquire)) {
      spawned += slot->spawned.load(std::memory_order_acquire);
      completed += slot->completed.load(std::memory_order_acquire);
    }
  }
  return spawned > completed ? static_cast<std::size_t>(spawned - completed)
                             : 0;
}

std::size_t Scheduler::num_parked() const {
  const std::size_t workers = idle_.num_workers();
  const std::size_t unparked = idle_.num_unparked();
  return workers > unparked ? workers - unparked : 0;
}

bool Scheduler::IsQuiescent() const {
  if (!injector_.IsEmpty() || AnyLocalWork(std::nullopt)) return false;
  const std::size_t n = slot_count();
  for (std::size_t i = 0; i < n; ++i) {
    const WorkerSlot* slot = slots_[i].load(std::memory_order_acquire);
    if (slot == nullptr) continue;
    if (slot->metrics.current_task_id.load(std::memory_order_acquire) != 0 ||
        slot->metrics.lifo_occupied.load(std::memory_order_acquire)) {
      return false;
    }
  }
  return true;
}

void Scheduler::WorkerMain(std::size_t index) {
  WorkerSlot* slot = slots_[index].load(std::memory_order_acquire);
  pthread_setname_np(pthread_self(),
                     absl::StrCat(options_.thread_name_prefix, "-", index)
                         .substr(0, 15)
                         .c_str());
  Worker worker(this, index, slot);
  current_worker = &worker;
  slot->metrics.os_thread_id.store(static_cast<std::int32_t>(gettid()),
                                   std::memory_order_relaxed);
  slot->metrics.pthread_id.store(static_cast<std::uint64_t>(pthread_self()),
                                 std::memory_order_relaxed);
  RunHook(hooks_.on_start, index);
  bool counted = true;  // In live_workers_.
  while (true) {
    SetPhase(slot->metrics, metrics::WorkerPhase::kActive);
    worker.Run();  // Returns when the scheduler closes or the slot retires.
    SetPhase(slot->metrics, metrics::WorkerPhase::kExited);
    if (closed() || !options_.keep_retired_threads) break;
    if (!SleepDormant(*slot, index)) {
      counted = false;
      break;
    }
  }
  RunHook(hooks_.on_stop, index);
  current_worker = nullptr;
  if (counted) live_workers_.fetch_sub(1, std::memory_order_acq_rel);
  slot->status.store(SlotStatus::kExited, std::memory_order_release);
}

bool Scheduler::SleepDormant(WorkerSlot& slot, std::size_t index) {
  // As around a park: the Python layer detaches from the interpreter here.
  RunHook(hooks_.before_park, index);
  bool revived;
  {
    std::unique_lock<std::mutex> lock(slot.dormant_mu);
    slot.status.store(SlotStatus::kDormant, std::memory_order_release);
    // Uncounted only once dormant: whoever sees the count fall can revive
    // this slot (a resize up that comes sooner, while it is still
    // retiring, starts a thread in another slot).
    live_workers_.fetch_sub(1, std::memory_order_acq_rel);
    // Revived means no longer kDormant: kRunning, or already kRetiring
    // again when a resize down came before this thread woke.
    slot.dormant_cv.wait(lock, [&] {
      return closed() || slot.status.load(std::memory_order_acquire) !=
                             SlotStatus::kDormant;
    });
    // Revived and closed at once: the reviver counted this worker, so it
    // runs again (Run() sees the close, or the retirement, and returns).
    revived =
        slot.status.load(std::memory_order_acquire) != SlotStatus::kDormant;
  }
  RunHook(hooks_.after_unpark, index);
  return revived;
}

// ---------------------------------------------------------------------------
// Worker

bool Scheduler::Worker::ShouldExit() const {
  return scheduler->closed() ||
         slot->status.load(std::memory_order_acquire) == SlotStatus::kRetiring;
}

void Scheduler::Worker::Run() {
  BeginBusyPeriod();
  while (true) {
    if (scheduler->closed()) {
      DrainCancelled();
      EndBusyPeriod();
      return;
    }
    if (slot->status.load(std::memory_order_acquire) == SlotStatus::kRetiring) {
      Retire();
      EndBusyPeriod();
      return;
    }
    if (until_event == 0) {
      until_event = scheduler->options_.event_interval;
      Maintenance();
    }
    --until_event;
    LoneWorkerRound();
    if (task::Task* t = NextTask()) {
      RunWithLifo(t);
      continue;
    }
    if (task::Task* t = StealWork()) {
      RunWithLifo(t);
      continue;
    }
    if (task::Task* t = SpinForWork()) {
      RunWithLifo(t);
      continue;
    }
    // Not parked yet: whatever the hook queues is found by the next look,
    // never stranded behind a park.
    if (scheduler->hooks_.before_idle && scheduler->hooks_.before_idle(index)) continue;
    Park();
  }
}

task::Task* Scheduler::Worker::NextTask() {
  Injector& injector = scheduler->injector_;
  // A lone worker keeps asyncio's one queue: what other threads scheduled
  // (call_soon_threadsafe) waits in the injector, and was scheduled before
  // whatever this worker queues after seeing it done (a step that waited
  // for that thread, then yielded), so it goes first. One atomic load when
  // the injector is empty. A thread that keeps the injector full cannot
  // starve the local queue: after global_queue_interval injector units in
  // a row, a local one runs.
  const bool lone_fifo = scheduler->options_.lone_worker_fifo &&
                         scheduler->idle_.num_workers() <= 1;
  if (lone_fifo) {
    if (injector_streak < scheduler->options_.global_queue_interval) {
      if (task::Task* t = injector.Pop()) {
        ++injector_streak;
        return t;
      }
    }
    injector_streak = 0;
  } else if (until_global == 0) {
    until_global = scheduler->options_.global_queue_interval;
    --until_global;
    if (task::Task* t = injector.Pop()) return t;
  } else {
    --until_global;
  }
  if (task::Task* t = slot->queue.Pop()) return t;
  if (injector.IsEmpty()) return nullptr;
  // Take a fair share of the global queue in one lock, not one at a time.
  const std::size_t workers =
      std::max<std::size_t>(1, scheduler->idle_.num_workers());
  std::size_t want = injector.Len() / workers + 1;
  want = std::min<std::size_t>(want, slot->queue.RemainingSlots());
  want = std::min<std::size_t>(want, LocalQueue::kCapacity / 2);
  if (want == 0) return injector.Pop();
  std::vector<task::Task*> batch;
  batch.reserve(want);
  if (injector.PopBatch(want, batch) == 0) return nullptr;
  for (std::size_t i = 1; i < batch.size(); ++i) {
    // Room was checked above and only this thread pushes.
    if (!slot->queue.TryPush(batch[i])) injector.Push(batch[i]);
  }
  return batch[0];
}

task::Task* Scheduler::Worker::StealWork() {
  if (!searching) {
    if (!scheduler->idle_.TransitionWorkerToSearching()) return nullptr;
    searching = true;
    SetPhase(slot->metrics, metrics::WorkerPhase::kSearching);
  }
  const std::size_t n = scheduler->slot_count();
  const std::size_t start = n == 0 ? 0 : NextRandom() % n;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    if (i == index) continue;
    WorkerSlot* victim = scheduler->slots_[i].load(std::memory_order_acquire);
    if (victim == nullptr) continue;
    std::uint32_t stolen = 0;
    if (task::Task* t = victim->queue.StealInto(slot->queue, stolen)) {
      metrics::OwnerAdd(slot->metrics.steals, 1);
      metrics::OwnerAdd(slot->metrics.stolen_units, stolen);
      victim->metrics.stolen_from.fetch_add(1, std::memory_order_relaxed);
      return t;
    }
  }
  return scheduler->injector_.Pop();
}

// Work that units hand each other every few microseconds (tasks taking
// turns on one lock or queue) often leaves a worker with nothing for a
// moment; parking then costs a futex or eventfd wake and a reschedule per
// gap, more than the gap itself. primitive_ops at two workers parked about
// 3,000 times per cell and ran slower than one worker; looking on for a
// bounded while first (as Go's spinning threads do) parks a few dozen
// times (docs/benchmarks.md). A lone worker has nobody to take work from.
task::Task* Scheduler::Worker::SpinForWork() {
  const std::uint32_t spin_us = scheduler->options_.idle_spin_us;
  if (spin_us == 0 || !searching || scheduler->target_workers() < 2) {
    return nullptr;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  do {
    for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield" ::: "memory");
#endif
    }
    if (scheduler->closed()) return nullptr;
    if (task::Task* t = NextTask()) return t;
    if (task::Task* t = StealWork()) return t;
  } while (std::chrono::steady_clock::now() < deadline);
  return nullptr;
}

void Scheduler::Worker::LeaveSearching() {
  if (!searching) return;
  searching = false;
  SetPhase(slot->metrics, metrics::WorkerPhase::kActive);
  // The last searcher found work: if more is queued anywhere (pushed while
  // producers saw us searching and so woke nobody), someone else must come
  // and look. If every queue is empty, waking a sleeper would only put a
  // futex wake on the path to running this task.
  if (scheduler->idle_.TransitionWorkerFromSearching()) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    scheduler->NotifyIfWorkPending(std::nullopt);
  }
}

void Scheduler::Worker::RunOne(task::Task* task) {
  metrics::WorkerMetrics& m = slot->metrics;
  // The stall detector (Runtime's supervisor) samples this id together
  // with units_run to tell how long one unit has held the worker.
  m.current_domain.store(task->domain(), std::memory_order_relaxed);
  m.current_task_id.store(task->id(), std::memory_order_release);
  {
    Strand::RunScope scope;  // Its wakes to strands go when it returns.
    task::RunTask(task);
  }
  m.current_task_id.store(0, std::memory_order_release);
  metrics::OwnerAdd(m.units_run, 1);
}

// Busy time is measured between unparking and parking, not per unit, so
// running a unit costs no clock read. The period's start lives only in the
// metrics (the worker is its one writer), where snapshots read it too.
void Scheduler::Worker::BeginBusyPeriod() {
  slot->metrics.busy_since_ns.store(NowNs(), std::memory_order_relaxed);
}

void Scheduler::Worker::EndBusyPeriod() {
  const std::int64_t since =
      slot->metrics.busy_since_ns.load(std::memory_order_relaxed);
  if (since == 0) return;
  // Cleared first: a snapshot in between undercounts this period for a
  // moment rather than counting it twice.
  slot->metrics.busy_since_ns.store(0, std::memory_order_relaxed);
  metrics::OwnerAdd(slot->metrics.busy_ns,
                    static_cast<std::uint64_t>(NowNs() - since));
}

void Scheduler::Worker::RunWithLifo(task::Task* task) {
  LeaveSearching();
  RunOne(task);
  std::uint32_t lifo_polls = 0;
  while (lifo != nullptr) {
    task::Task* next = std::exchange(lifo, nullptr);
    slot->metrics.lifo_occupied.store(false, std::memory_order_relaxed);
    if (lifo_polls >= scheduler->options_.max_lifo_polls ||
        scheduler->closed()) {
      // Enough ping-pong: the queue gets its turn.
      scheduler->PushLocal(*slot, next);
      return;
    }
    ++lifo_polls;
    RunOne(next);
  }
}

void Scheduler::Worker::Maintenance() {
  parked = true;  // Reactor wakes from here go to the queue.
  if (slot->parker.PollDriver()) {
    metrics::OwnerAdd(slot->metrics.reactor_polls, 1);
  }
  parked = false;
  NotifyForReactorWork();
}

// asyncio's loop polls for I/O once per iteration, before it runs the
// callbacks that were ready then: data written to a socket is seen by its
// peer's protocol within the next iteration (websockets' tests count on two
// sleep(0) for a round trip through a socket pair). A lone worker keeps
// that rhythm: when it has run the units that were queued at its last
// poll (a round), it polls again without sleeping, if the reactor has
// anything to report (registrations or timers). With several workers no
// order holds anyway, and they poll every event_interval ticks.
void Scheduler::Worker::LoneWorkerRound() {
  if (!scheduler->options_.lone_worker_fifo ||
      scheduler->idle_.num_workers() > 1)
    return;
  if (round_left == 0) {
    const SharedDriver* shared = scheduler->driver_;
    if (shared != nullptr && shared->workers_drive &&
        shared->driver != nullptr && shared->driver->HasWork()) {
      Maintenance();
    }
    // The units queued now make the round; what they queue runs after
    // the next poll, as the next iteration's callbacks do in asyncio.
    round_left = slot->queue.Len() +
                 static_cast<std::uint32_t>(scheduler->injector_.Len());
  }
  if (round_left > 0) --round_left;  // The unit this tick runs.
}

void Scheduler::Worker::NotifyForReactorWork() {
  // This worker takes one task; every other one a turn of the reactor made
  // ready may wake a sleeper, whether or not someone is searching: reactor
  // wakeups are not throttled.
  std::uint32_t extra = slot->queue.Len();
  if (extra <= 1) return;
  for (--extra; extra > 0; --extra) {
    if (!scheduler->NotifyParked(/*unthrottled=*/true, index)) break;
  }
}

void Scheduler::Worker::Park() {
  EndBusyPeriod();
  Idle& idle = scheduler->idle_;
  const bool was_searching = searching;
  searching = false;
  const bool last_searcher =
      idle.TransitionWorkerToParked(index, was_searching);
  // Work pushed between our last look and the line above would otherwise
  // wait for somebody else to finish a unit.
  if (last_searcher || !scheduler->injector_.IsEmpty()) {
    scheduler->NotifyIfWorkPending(std::nullopt);
  }
  metrics::OwnerAdd(slot->metrics.parks, 1);
  // A rerun asked for while this worker was busy: before_park below is it,
  // after a before_idle, for what was handed to this thread since its last
  // look (a closing loop's last step, on another worker, dropping the
  // objects this worker made: free-threaded CPython queues them here, and
  // a parked thread keeps them until it next runs Python code). What that
  // queues is found below: RerunParkHooks' unpark makes the park return.
  if (slot->rerun_park_hooks.exchange(false, std::memory_order_acquire) &&
      scheduler->hooks_.before_idle) {
    scheduler->hooks_.before_idle(index);
  }
  RunHook(scheduler->hooks_.before_park, index);
  SetPhase(slot->metrics, metrics::WorkerPhase::kParked);
  parked = true;
  while (true) {
    if (ShouldExit()) {
      if (!idle.UnparkWorkerById(index)) {
        // A producer already unparked us and counted us as searching.
        scheduler->idle_.TransitionWorkerFromSearching();
      }
      break;
    }
    if (slot->parker.Park(std::nullopt)) {
      metrics::OwnerAdd(slot->metrics.reactor_polls, 1);
    }
    if (slot->rerun_park_hooks.load(std::memory_order_relaxed) &&
        slot->rerun_park_hooks.exchange(false, std::memory_order_acquire)) {
      RunHook(scheduler->hooks_.after_unpark, index);
      // What was handed to this thread while it slept (parked, so what the
      // hook queues goes on the local queue, looked at below).
      if (scheduler->hooks_.before_idle) scheduler->hooks_.before_idle(index);
      RunHook(scheduler->hooks_.before_park, index);
    }
    if (!slot->queue.IsEmpty()) {
      // The reactor handed us work while we drove it.
      if (!idle.UnparkWorkerById(index)) searching = true;
      NotifyForReactorWork();
      break;
    }
    if (!idle.IsParked(index)) {
      searching = true;  // Unparked by a producer, counted as searching.
      break;
    }
  }
  parked = false;
  SetPhase(slot->metrics, searching ? metrics::WorkerPhase::kSearching
                                    : metrics::WorkerPhase::kActive);
  RunHook(scheduler->hooks_.after_unpark, index);
  BeginBusyPeriod();
}

void Scheduler::Worker::Retire() {
  LeaveSearching();
  std::vector<task::Task*> handoff;
  if (lifo != nullptr) {
    handoff.push_back(std::exchange(lifo, nullptr));
    slot->metrics.lifo_occupied.store(false, std::memory_order_relaxed);
  }
  while (task::Task* t = slot->queue.Pop()) handoff.push_back(t);
  scheduler->idle_.RemoveWorker();
  // If this worker was the one sleeping in the reactor, the others sleep on
  // condition variables and nobody would drive timers and I/O any more:
  // wake one so it parks again and takes the reactor over.
  // (If nobody is asleep, whoever parks next takes the reactor.)
  scheduler->NotifyParked(/*unthrottled=*/true, index);
  if (!handoff.empty()) {
    scheduler->injector_.PushBatch(handoff);
    for (std::size_t i = 0; i < handoff.size() && i < 4; ++i) {
      scheduler->NotifyParked(/*unthrottled=*/false);
    }
    // Every sleeper may be counted "searching" by now; make sure one wakes.
    scheduler->NotifyIfWorkPending(index);
  }
}

void Scheduler::Worker::DrainCancelled() {
  if (lifo != nullptr) {
    scheduler->CancelInline(std::exchange(lifo, nullptr));
    slot->metrics.lifo_occupied.store(false, std::memory_order_relaxed);
  }
  while (task::Task* t = slot->queue.Pop()) scheduler->CancelInline(t);
  scheduler->DrainInjectorCancelled();
}

}  // namespace mt::runtime::scheduler
