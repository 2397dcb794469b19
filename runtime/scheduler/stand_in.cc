// The stand-in worker: one extra thread the supervisor starts when every
// worker has been held by one unit for a while, so that queued work still
// runs. What it is for: a step that blocks until work queued behind it is
// done. At one worker, a step of loop A calling
// run_coroutine_threadsafe(coro, B).result() for a loop B that another
// thread runs waits for B's units, which only a worker can run, and the
// only worker is the one waiting (stdlib's B has a thread of its own).
//
// Blocking a worker is still the program's choice and asyncio's rule still
// holds for the blocked loop: the stand-in never runs a unit of a domain
// (loop) whose unit holds a worker, so that loop runs nothing beside its
// blocked step, and what it had queued keeps its place in the injector.
// What it schedules goes to the injector, where it finds it again. What
// the held workers had queued (a lone worker queues its own loop's wakes
// locally, and the unit that then holds it may be another loop's) it moves
// to the injector's end, in order, when it finds nothing else to run:
// nobody steals at one worker, and the freed worker finds its own loop's
// units there, still in their order, ahead of what is queued later. It drives
// the reactor when the injector has nothing for it, as a parked worker would
// (the held workers cannot), and leaves once one of the units it stood in for
// returns.

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/scheduler/scheduler.h"
#include "runtime/scheduler/strand.h"

namespace mt::runtime::scheduler {

extern thread_local const Scheduler* stand_in_of;

namespace {

// How often a stand-in with nothing to run looks again at whether the
// workers are still held: the longest a freed worker waits for the reactor
// the stand-in was driving.
constexpr std::chrono::milliseconds kStandInRecheck{5};
// How far into the injector a stand-in looks past units it must leave
// alone (those of a held domain).
constexpr std::size_t kStandInScanLimit = 4096;

}  // namespace

bool Scheduler::StillHeld(const std::vector<HeldWorker>& held) const {
  for (const HeldWorker& h : held) {
    const WorkerSlot* slot = slots_[h.index].load(std::memory_order_acquire);
    if (slot == nullptr) return false;
    if (slot->metrics.current_task_id.load(std::memory_order_acquire) == 0 ||
        slot->metrics.units_run.load(std::memory_order_acquire) !=
            h.units_run) {
      return false;
    }
  }
  return !held.empty();
}

bool Scheduler::StartStandIn(const std::vector<HeldWorker>& held) {
  std::lock_guard<std::mutex> lock(stand_in_mu_);
  if (closed() || stand_in_running_.load(std::memory_order_acquire))
    return false;
  for (const HeldWorker& h : held) {
    if (h.index >= options_.max_workers) return false;
  }
  if (!StillHeld(held)) return false;
  std::vector<std::uintptr_t> domains;
  for (const HeldWorker& h : held) {
    const WorkerSlot* slot = slots_[h.index].load(std::memory_order_acquire);
    // Written before the unit's id, which StillHeld saw: this unit's.
    const std::uintptr_t d =
        slot->metrics.current_domain.load(std::memory_order_relaxed);
    if (d != 0) domains.push_back(d);
  }
  if (stand_in_thread_.joinable())
    stand_in_thread_.join();  // The last one, gone.
  stand_in_running_.store(true, std::memory_order_release);
  // Counted first: whatever the new thread runs happens after the count.
  stand_ins_started_.fetch_add(1, std::memory_order_relaxed);
  try {
    stand_in_thread_ = std::thread([this, held, domains]() mutable {
      StandInMain(std::move(held), std::move(domains));
    });
  } catch (const std::system_error&) {
    stand_ins_started_.fetch_sub(1, std::memory_order_relaxed);
    stand_in_running_.store(false, std::memory_order_release);
    return false;  // No thread now; the supervisor tries again later.
  }
  return true;
}

void Scheduler::AdoptHeldQueues(const std::vector<HeldWorker>& held) {
  std::vector<task::Task*> adopted;
  for (const HeldWorker& h : held) {
    WorkerSlot* slot = slots_[h.index].load(std::memory_order_acquire);
    // Another thief may be mid-steal for a moment: a few tries, then the
    // next look.
    for (int tries = 0; tries < 4 && !slot->queue.IsEmpty();) {
      std::uint32_t moved = 0;
      task::Task* newest = slot->queue.StealInto(stand_in_queue_, moved);
      if (newest == nullptr) {
        ++tries;
        continue;
      }
      while (task::Task* t = stand_in_queue_.Pop()) adopted.push_back(t);
      adopted.push_back(newest);
    }
  }
  injector_.PushBatch(adopted);
}

void Scheduler::StandInMain(std::vector<HeldWorker> held,
                            std::vector<std::uintptr_t> held_domains) {
  pthread_setname_np(pthread_self(), "mt-stand-in");
  stand_in_of = this;
  // An index no worker has, for the hooks (the Python layer attaches the
  // thread to the interpreter with them).
  const std::size_t index = options_.max_workers;
  RunHook(hooks_.on_start, index);
  while (!closed() && StillHeld(held)) {
    task::Task* t = injector_.PopOutside(held_domains, kStandInScanLimit);
    if (t == nullptr) {
      AdoptHeldQueues(held);
      t = injector_.PopOutside(held_domains, kStandInScanLimit);
    }
    if (t != nullptr) {
      // Counted first, as the start: what the unit does comes after.
      stand_in_units_run_.fetch_add(1, std::memory_order_relaxed);
      Strand::RunScope scope;  // As a worker runs a unit (see RunOne).
      task::RunTask(t);
      continue;
    }
    RunHook(hooks_.before_park, index);
    stand_in_parker_.Park(kStandInRecheck);
    RunHook(hooks_.after_unpark, index);
  }
  RunHook(hooks_.on_stop, index);
  stand_in_of = nullptr;
  stand_in_running_.store(false, std::memory_order_release);
  // A freed worker that parked while this thread held the reactor sleeps
  // on its condition variable; one of them takes the reactor over.
  if (!closed()) NotifyParked(/*unthrottled=*/true);
}

void Scheduler::JoinStandIn() {
  std::thread done;
  {
    std::lock_guard<std::mutex> lock(stand_in_mu_);
    done = std::move(stand_in_thread_);
  }
  while (done.joinable()) {
    if (!stand_in_running_.load(std::memory_order_acquire)) {
      done.join();
      break;
    }
    stand_in_parker_.Unpark();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace mt::runtime::scheduler
