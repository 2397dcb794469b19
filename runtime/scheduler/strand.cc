#include "runtime/scheduler/strand.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace mt::runtime::scheduler {
namespace {

thread_local Strand* current_strand = nullptr;

// The strand whose Poll runs a unit on this thread, or nullptr. Not
// current_strand: a CurrentScope makes a strand current on a thread that
// does not run it (to bind what is made there), and a wake of that strand
// must still be held like any other until the running unit returns.
thread_local Strand* polling_strand = nullptr;

// The source of wake-order tickets (Strand::TakeTicket). Relaxed: tickets
// order admission for fairness; exclusion never depends on them.
std::atomic<std::uint64_t> next_ticket{1};

// A wake held by a RunScope: of a strand (`strand`, with a reference to
// it) whose queue holds the unit at `seq` until the hand-over, or of a
// plain unit that followed one (Strand::HoldBehindHeldWakes), whose queue
// reference the entry owns until `target` gets it.
struct HeldWake {
  task::Task* task;        // A plain unit, or nullptr.
  task::Executor* target;  // The plain unit's executor.
  task::ScheduleKind kind;
  Strand* strand;  // nullptr for a plain unit.
  std::uint64_t seq;
  // The units ever queued on the strand whose unit made the wake, at the
  // moment (Strand::pushed_): those went before it.
  std::uint64_t waker_pushed;
  // The woken unit was queued already (`seq` is the strand's last queued
  // unit then): only remembered for ordering, nothing to hand over.
  bool queued_already = false;
};

// The wakes held by the RunScopes open on this thread, how many scopes are
// open, where the innermost one's entries begin, and whether a scope is
// handing its entries over now (they go through, not back on the list).
thread_local std::vector<HeldWake> held_wakes;
thread_local int open_scopes = 0;
thread_local std::size_t innermost_start = 0;
thread_local bool handing_over = false;

// Runs the cancel path of a unit the caller owns the queue's reference of.
void CancelQueued(task::Task* task) {
  task->state().Cancel();
  task::RunTask(task);
}

}  // namespace

Strand::Strand(Strand* parent, Inherit inherit, std::uint64_t made_for)
    : Task(/*scheduled=*/false), parent_(parent), inherit_(inherit), made_for_(made_for) {
  if (parent_ != nullptr) parent_->Ref();
}

Strand::~Strand() {
  for (const WokenDescendant& woken : woken_descendants_) woken.strand->Unref();
  if (parent_ != nullptr) parent_->Unref();
}

Strand* Strand::Create(task::Executor* target, Strand* parent, Inherit inherit,
                       std::uint64_t made_for) {
  auto* strand = new Strand(parent, inherit, made_for);
  strand->set_executor(target);
  return strand;
}

bool Strand::Excludes(const Strand* other) const {
  for (const Strand* s = other; s != nullptr; s = s->parent_) {
    if (s == this) return true;
  }
  return false;
}

bool Strand::EnterAncestors() {
  // The number of our next unit: whether it was queued before or after a
  // wake of an ancestor (woken_ancestors_).
  std::uint64_t next_unit = 0;
  if (!woken_ancestors_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    next_unit = popped_;
  }
  for (Strand* a = parent_; a != nullptr; a = a->parent_) {
    {
      std::lock_guard<std::mutex> lock(a->gate_mu_);
      // A waiting writer lets the readers woken before it go first.
      // (A waiting writer keeps its ticket: nothing is popped from its
      // queue while it waits, so no push finds the queue empty.)
      if (!a->writer_running_ &&
          (!a->writer_waiting_ ||
           ticket_.load(std::memory_order_relaxed) <
               a->ticket_.load(std::memory_order_relaxed)) &&
          !WaitsForRunOf(a, next_unit)) {
        ++a->readers_;
        continue;
      }
      Ref();  // Until `a` wakes us.
      a->blocked_.push_back(this);
    }
    LeaveAncestors(a);
    return false;
  }
  return true;
}

bool Strand::WaitsForRunOf(const Strand* ancestor, std::uint64_t next_unit) {
  bool waits = false;
  for (std::size_t i = 0; i < woken_ancestors_.size();) {
    const WokenAncestor& woken = woken_ancestors_[i];
    if (woken.strand != ancestor) {
      ++i;
    } else if (woken.writer_entries !=
               ancestor->writer_entries_.load(std::memory_order_relaxed)) {
      // It has run since: forgotten.
      woken_ancestors_[i] = woken_ancestors_.back();
      woken_ancestors_.pop_back();
    } else {
      waits = waits || next_unit >= woken.queued_before;
      ++i;
    }
  }
  return waits;
}

std::uint64_t Strand::QueuedBeforeRecordedWakes() const {
  std::uint64_t first = UINT64_MAX;
  for (const WokenAncestor& woken : woken_ancestors_)
    first = std::min(first, woken.queued_before);
  for (const WokenDescendant& woken : woken_descendants_)
    first = std::min(first, woken.queued_before);
  return first;
}

bool Strand::AwaitWokenDescendants(std::uint64_t next_unit) {
  std::vector<Strand*> forgotten;
  bool waits = false;
  for (std::size_t i = 0; i < woken_descendants_.size();) {
    const WokenDescendant woken = woken_descendants_[i];
    Strand* d = woken.strand;
    {
      // Looked at and queued on under the descendant's gate: the end of a
      // poll that takes the unit after we looked wakes us (WakeBlocked).
      std::lock_guard<std::mutex> gate(d->gate_mu_);
      bool ran;
      {
        std::lock_guard<std::mutex> lock(d->mu_);
        ran = d->popped_ > woken.unit;  // A cancel counts its queue popped.
      }
      if (!ran && next_unit >= woken.queued_before) {
        Ref();  // Until `d` wakes us.
        d->blocked_.push_back(this);
        waits = true;
        break;
      }
      if (!ran) {
        ++i;
        continue;
      }
    }
    forgotten.push_back(d);
    woken_descendants_[i] = woken_descendants_.back();
    woken_descendants_.pop_back();
  }
  for (Strand* d : forgotten) d->Unref();
  return waits;
}

void Strand::LeaveAncestors(const Strand* stop) {
  for (Strand* a = parent_; a != stop; a = a->parent_) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(a->gate_mu_);
      wake = --a->readers_ == 0 && a->writer_waiting_;
    }
    if (wake) a->Wake(task::ScheduleKind::kWake);
  }
}

bool Strand::EnterSelf() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  if (readers_ > 0) {
    writer_waiting_ = true;  // Readers woken after us hold off; the last one out wakes us.
    return false;
  }
  writer_running_ = true;
  writer_waiting_ = false;
  writer_entries_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Strand::LeaveSelf() {
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    writer_running_ = false;
  }
  WakeBlocked();
}

void Strand::WakeBlocked() {
  std::vector<Strand*> blocked;
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    // Still waiting to run (a budget's worth left queued): they may queue
    // on us again, which is what keeps a busy owner from starving.
    blocked.swap(blocked_);
  }
  for (Strand* s : blocked) {
    s->Wake(task::ScheduleKind::kWake);
    s->Unref();
  }
}

bool Strand::writer_waiting() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  return writer_waiting_;
}

void Strand::TakeTicket() {
  ticket_.store(next_ticket.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
}

int Strand::running_descendants() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  return readers_;
}

Strand* Strand::Current() { return current_strand; }

void Strand::NoteWake(const task::Task* woken) {
  Strand* poller = polling_strand;
  // A hand-over is noted at the wake it follows, when it was held. Noted
  // whatever the executor: a thread-local look and a store to the poller's
  // own field cost less than asking whether rounds are kept, and only a
  // poll that keeps them reads it.
  if (poller == nullptr || handing_over || woken == poller) return;
  poller->queued_before_wake_ = poller->pushed_.load(std::memory_order_relaxed);
}

void Strand::Schedule(task::Task* task, task::ScheduleKind kind) {
  NoteWake(this);
  if (kind == task::ScheduleKind::kYield) {
    // The running unit gave way: Poll ends after it (see there).
    if (polling_strand == this) unit_yielded_ = true;
    kind = task::ScheduleKind::kWake;
  }
  // A remote wake is not held: the scope's owner may block on it. A unit
  // of the strand that runs here needs no hold: it cannot start before
  // the running one returns. Any other is queued now, in call order with
  // what other threads queue, but marked held: a poll of this strand
  // already running on another worker stops in front of it until the
  // running unit's scope hands it over.
  const bool hold =
      open_scopes > 0 && polling_strand != this && kind != task::ScheduleKind::kRemote;
  std::uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      if (queue_.empty()) TakeTicket();
      seq = popped_ + queue_.size();
      queue_.push_back(Queued{task, hold});
      pushed_.store(seq + 1, std::memory_order_relaxed);
      task = nullptr;
    }
  }
  if (task != nullptr) {
    CancelQueued(task);
    return;
  }
  if (hold) {
    Ref();  // Held until the running unit's scope hands it over.
    // Read here, not when the run ends: the running unit requeued for a
    // wake during its run (the reactor's next report) comes after this.
    const std::uint64_t waker_pushed =
        polling_strand != nullptr
            ? polling_strand->pushed_.load(std::memory_order_relaxed)
            : 0;
    held_wakes.push_back(
        HeldWake{nullptr, nullptr, kind, this, seq, waker_pushed});
    return;
  }
  // One wake per unit queued. While the strand runs, the state word
  // remembers it and the strand is queued again once this poll ends, so a
  // unit pushed after the poll looked at the queue for the last time is
  // never stranded.
  Wake(kind);
}

void Strand::OnWakeWithoutQueueing(task::Task*, task::ScheduleKind kind) {
  // A unit of an ancestor's poll woke one of ours that is queued already
  // (the reactor woke a connection that the step now closes): the
  // ancestor's next units wait for it as for a unit the wake had queued
  // (woken_descendants_), behind everything queued here now.
  Strand* waker = polling_strand;
  if (open_scopes == 0 || handing_over || kind == task::ScheduleKind::kRemote ||
      waker == nullptr || waker == this || !waker->Excludes(this)) {
    return;
  }
  std::uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;  // Running elsewhere or done: not waited for.
    last = popped_ + queue_.size() - 1;
  }
  Ref();  // Until the scope ends.
  held_wakes.push_back(HeldWake{nullptr, nullptr, kind, this, last,
                                waker->pushed_.load(std::memory_order_relaxed),
                                /*queued_already=*/true});
}

void Strand::ReleaseHeld(std::uint64_t seq, task::ScheduleKind kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Gone already if a cancel emptied the queue meanwhile.
    if (seq >= popped_) queue_[seq - popped_].held = false;
  }
  Wake(kind);
}

Strand::CurrentScope::CurrentScope(Strand* strand)
    : outer_(std::exchange(current_strand, strand)) {}

Strand::CurrentScope::~CurrentScope() { current_strand = outer_; }

Strand::RunScope::RunScope()
    : start_(held_wakes.size()), outer_start_(std::exchange(innermost_start, start_)) {
  ++open_scopes;
}

Strand::RunScope::~RunScope() {
  --open_scopes;
  innermost_start = outer_start_;
  if (held_wakes.size() == start_) return;
  // Taken off the list first: what a hand-over runs (a cancel path on a
  // closed scheduler) may hold wakes of its own in an outer scope.
  std::vector<HeldWake> mine(held_wakes.begin() + static_cast<std::ptrdiff_t>(start_),
                             held_wakes.end());
  held_wakes.resize(start_);
  const bool outer_handing_over = std::exchange(handing_over, true);
  for (const HeldWake& held : mine) {
    if (held.strand != nullptr) {
      if (!held.queued_already) held.strand->ReleaseHeld(held.seq, held.kind);
      held.strand->Unref();
    } else {
      held.target->Schedule(held.task, held.kind);
    }
  }
  handing_over = outer_handing_over;
}

Strand::RunScope::WakesSeen Strand::RunScope::SortWakesFor(
    Strand* strand) const {
  WakesSeen seen;
  for (std::size_t i = start_; i < held_wakes.size(); ++i) {
    Strand* woken = held_wakes[i].strand;
    if (woken == nullptr || woken == strand) continue;  // Plain, or ours.
    if (strand->Excludes(woken)) {
      woken->Ref();
      strand->woken_descendants_.push_back(WokenDescendant{
          woken, held_wakes[i].seq, held_wakes[i].waker_pushed});
      seen.descendant = true;
    } else if (woken->Excludes(strand)) {
      // No lock: its writer cannot enter while `strand` polls (a reader).
      const std::uint64_t entries =
          woken->writer_entries_.load(std::memory_order_relaxed);
      strand->woken_ancestors_.push_back(
          WokenAncestor{woken, entries, held_wakes[i].waker_pushed});
      seen.ancestor = true;
    }
  }
  return seen;
}

bool Strand::HoldBehindHeldWakes(task::Task* task, task::Executor* target,
                                 task::ScheduleKind kind) {
  if (handing_over || open_scopes == 0 || held_wakes.size() <= innermost_start ||
      kind == task::ScheduleKind::kRemote) {
    return false;
  }
  held_wakes.push_back(HeldWake{task, target, kind, nullptr, 0, 0});
  return true;
}

void Strand::OnComplete(task::Task* task) { executor()->OnComplete(task); }

bool Strand::KeepsRounds() const { return executor()->KeepsRounds(); }

task::Task* Strand::Pop(std::uint64_t stop_at, bool* stopped) {
  std::lock_guard<std::mutex> lock(mu_);
  // A held unit is not run before its scope hands it over, nor what was
  // queued after it; the hand-over wakes the strand again.
  if (queue_.empty() || queue_.front().held) return nullptr;
  if (popped_ >= stop_at) {
    *stopped = true;
    return nullptr;
  }
  task::Task* task = queue_.front().task;
  queue_.pop_front();
  ++popped_;
  return task;
}

bool Strand::Poll() {
  // Our next unit waits for a unit of a descendant that one of ours woke
  // (the descendant's poll wakes us), or is parked on an ancestor (it
  // wakes us when it is done), or waits for our descendants' current
  // units (the last one wakes us).
  if (!woken_descendants_.empty()) {
    std::uint64_t next_unit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      next_unit = popped_;
    }
    if (AwaitWokenDescendants(next_unit)) return false;
  }
  if (!EnterAncestors()) return false;
  if (!EnterSelf()) {
    LeaveAncestors(nullptr);
    return false;
  }
  Strand* outer = std::exchange(current_strand, this);
  Strand* outer_polling = std::exchange(polling_strand, this);
  int ran = 0;
  bool gave_way = false;
  // Nothing was runnable: the queue was empty (the next push tickets) or
  // its front held (the hand-over wakes the strand). No wake to ask for.
  bool nothing_runnable = false;
  // Our units queued after a wake of an ancestor wait for its run, those
  // queued after a wake of a descendant for the woken unit's. Where the
  // executor keeps rounds, what our units queue here waits for the next
  // poll, behind what was ready elsewhere: on a one-thread loop the
  // callback a step schedules runs in the next iteration, after the ones
  // ready before it (a connection's connection_lost, queued before the
  // main task's done callbacks, runs before the loop's stop).
  const bool rounds = KeepsRounds();
  const std::uint64_t round_end =
      rounds ? pushed_.load(std::memory_order_acquire) : UINT64_MAX;
  queued_before_wake_ = 0;
  // The round takes in our units queued before a wake our units made: on
  // a one-thread loop they run before the woken unit.
  auto round_stop = [&] {
    return std::min(std::max(round_end, queued_before_wake_),
                    QueuedBeforeRecordedWakes());
  };
  std::uint64_t stop_at = round_stop();
  for (; ran < kBudget; ++ran) {
    bool stopped = false;
    task::Task* task = Pop(stop_at, &stopped);
    if (task == nullptr) {
      // At a unit queued after a wake of an ancestor, the next poll
      // queues on that ancestor (EnterAncestors) until it has run: on a
      // one-thread loop the task data_received woke steps before the
      // connection's next callback. At the round's end the next poll
      // queues behind what is waiting on the worker.
      if (stopped) {
        gave_way = true;
      } else {
        nothing_runnable = true;
      }
      break;
    }
    // A unit that wakes itself while it runs is pushed back on this queue
    // (Schedule above), behind whatever else is waiting here.
    bool woke_descendant;
    {
      RunScope scope;
      task::RunTask(task);
      const RunScope::WakesSeen seen = scope.SortWakesFor(this);
      woke_descendant = seen.descendant;
      if (seen.ancestor || rounds) stop_at = round_stop();
    }
    if (unit_yielded_) {
      // It asked to let others go first (asyncio.sleep(0)): running it
      // again here would not. The wake it made queues this strand again,
      // behind what is waiting on this worker.
      unit_yielded_ = false;
      ++ran;
      break;
    }
    if (woke_descendant) {
      // It woke one of our descendants (a task closing or writing to a
      // connection it owns), which cannot run while we do. On a one-thread
      // loop what it scheduled runs before what is scheduled after it (the
      // task's done callbacks): end the poll so the descendant goes first.
      ++ran;
      gave_way = true;
      break;
    }
  }
  current_strand = outer;
  polling_strand = outer_polling;
  LeaveSelf();
  LeaveAncestors(nullptr);
  bool more;
  std::uint64_t next_unit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    more = !queue_.empty();
    next_unit = popped_;
    // What is left waits behind what was woken meanwhile, however the poll
    // ended: a strand whose units keep yielding to each other must not keep
    // the ticket of its first wake and pass a waiting writer for ever. (A
    // unit queued after this look tickets and wakes the strand itself.)
    if (more && !nothing_runnable) TakeTicket();
  }
  if (!more && !woken_descendants_.empty()) {
    // Nothing of ours to run: be woken when the descendants have run what
    // we woke, to drop our references to them (each holds ours through
    // its parent chain) and so that what is queued here meanwhile waits.
    AwaitWokenDescendants(next_unit);
  }
  if (nothing_runnable)
    return false;  // A strand lives as long as references to it do.
  if (more && (ran == kBudget || gave_way)) {
    // Units queued before this poll began woke a strand that was already
    // scheduled, which the state word does not remember: ask again, and
    // let other work run first.
    Wake(task::ScheduleKind::kYield);
  }
  return false;  // A strand lives as long as references to it do.
}

void Strand::OnCancel() {
  std::deque<Queued> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    queued.swap(queue_);
    popped_ += queued.size();
  }
  for (const Queued& entry : queued) CancelQueued(entry.task);
  // Nothing of ours runs again: what our units woke need not be waited for.
  for (const WokenDescendant& woken : woken_descendants_) woken.strand->Unref();
  woken_descendants_.clear();
  {
    // A descendant waiting for our next run (woken_ancestors_) waits no
    // more: there is none to come.
    std::lock_guard<std::mutex> lock(gate_mu_);
    writer_entries_.fetch_add(1, std::memory_order_relaxed);
  }
  WakeBlocked();  // Their own cancel paths run from their wakes.
}

std::size_t Strand::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace mt::runtime::scheduler
