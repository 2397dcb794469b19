#ifndef MT_RUNTIME_SCHEDULER_STRAND_H_
#define MT_RUNTIME_SCHEDULER_STRAND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

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
// Strands nest. A strand made with a parent never runs while the parent
// (or any ancestor) runs, and a parent waits for its running descendants
// to finish their current units before it runs: a reader-writer gate per
// strand, where running descendants are readers and the strand's own
// units the writer. Siblings run in parallel. The task that makes a server
// or a client connection owns it this way (the connection's strand is a
// child of the task's): library code in that task, iterating over its
// connections or reading what their callbacks buffered, sees them as a
// one-thread loop would, while the connections run in parallel with each
// other. Admission is in wake order: a strand carries a ticket taken when
// it last became runnable (a unit queued on an empty queue, or a poll that
// left units behind), and a waiting writer holds off the readers woken
// after it while those woken before it still run — as a one-thread loop
// would run the callbacks ready before the owner's step first. So a busy
// set of connections cannot starve the task that owns them (each reader
// ahead of it runs one poll), and the workers keep running the readers
// already waiting instead of idling while the writer's turn drains: a
// waiting writer that held off every reader left all but one worker idle
// until the running readers finished, once per step of the owner.
//
// The strand is itself a unit of `target`: binding a unit to it
// (Task::set_executor) makes every wake of that unit go through
// Schedule(), which appends it to the strand's queue and wakes the strand.
// The strand runs at most kBudget units per poll, then yields its worker;
// a unit that yields (sleep(0)) ends the poll at once, so what it yields
// to — other strands, this strand's children — runs before it again; so
// does a unit that wakes one of this strand's descendants, which could not
// run before the poll ends, so that it runs before the units queued here
// after it, as on a one-thread loop: the strand's units queued after the
// wake wait until the descendant has run the woken unit. After a unit that
// wakes an ancestor, the strand's units queued later wait for that
// ancestor's next run: the woken unit goes first, as on a one-thread loop.
// On an executor that keeps rounds (one worker) a poll runs only the units
// queued before it began, and those its units queued here before they woke
// a unit elsewhere (NoteWake); what else they queue here waits for the next
// poll, as asyncio runs a callback's callbacks in its next iteration, in
// the order they were scheduled.
//
// Lifetime: reference counted through its unit state; each bound unit holds
// one reference (Retain/Release), the creator another.
class Strand final : public task::Task, public task::Executor {
 public:
  // Units a strand runs per poll before going to the back of a queue.
  static constexpr int kBudget = 64;

  // Whether the units made while a strand runs are bound to it (its
  // embedder's choice, see inherits()): a connection's strand keeps the
  // tasks its callbacks start; the strand a task joins to own connections
  // leaves the tasks it starts free to run in parallel.
  enum class Inherit { kNo, kYes };

  // A new idle strand on `target`, under `parent` (retained; nullptr: a
  // root), with one reference owned by the caller (drop it with Unref()).
  // `made_for` is the id (task::Task::id()) of the unit the embedder made
  // it for, when it is one unit's own strand (0: none); see made_for().
  static Strand* Create(task::Executor* target, Strand* parent = nullptr,
                        Inherit inherit = Inherit::kYes, std::uint64_t made_for = 0);
  ~Strand() override;

  // Whether this strand's units exclude those of `other`: it is `other` or
  // one of its ancestors. Code running on such a strand may touch what
  // `other`'s units touch.
  bool Excludes(const Strand* other) const;
  Strand* parent() const { return parent_; }
  bool inherits() const { return inherit_ == Inherit::kYes; }
  // The unit this strand was made for (its id), or 0. Units bound to the
  // strand because they were made while it ran carry another id: the
  // embedder tells a strand a unit owns from one it inherited.
  std::uint64_t made_for() const override { return made_for_; }

  // The strand whose unit the calling thread is running, or nullptr.
  static Strand* Current();

  // task::Executor. Takes over the queue's reference to `task` (in the
  // kScheduled state). Any thread.
  void Schedule(task::Task* task, task::ScheduleKind kind) override;
  void OnComplete(task::Task* task) override;
  void OnWakeWithoutQueueing(task::Task* task,
                             task::ScheduleKind kind) override;
  bool KeepsRounds() const override;
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
  // Descendants running now (for tests).
  int running_descendants();
  // Whether the strand waits for running descendants to leave (for tests).
  bool writer_waiting();

  // Makes `strand` Current() on this thread while it lives, as if one of
  // its units ran here: what the thread makes meanwhile is bound to it. For
  // a thread outside the runtime that starts the first unit of a strand.
  class CurrentScope {
   public:
    explicit CurrentScope(Strand* strand);
    ~CurrentScope();
    CurrentScope(const CurrentScope&) = delete;
    CurrentScope& operator=(const CurrentScope&) = delete;

   private:
    Strand* outer_;
  };

  // While a worker runs a unit, the units it wakes on other strands are
  // queued there in call order but held, and the strands' wakes with them,
  // until its run ends (a poll of such a strand already running elsewhere
  // stops in front of a held unit): whatever a step or
  // callback starts on another connection (closing it, waking a task bound
  // to it) begins after that step, as it would on a one-thread loop.
  // Without it, a library that closes its connections while iterating over
  // them (aiohttp's shutdown) saw each connection_lost remove entries from
  // the dict it was iterating, on another worker. Scopes nest; each hands
  // over what was held since it began. Wakes from outside any scope (the
  // reactor, timers, plain threads) go at once.
  class RunScope {
   public:
    RunScope();
    ~RunScope();
    RunScope(const RunScope&) = delete;
    RunScope& operator=(const RunScope&) = delete;

    // What the wakes held since this scope began were for, seen from
    // `strand`, whose poll calls it (it is a reader of all its ancestors).
    struct WakesSeen {
      bool descendant = false;  // A strand below `strand`.
      bool ancestor = false;    // Recorded in Strand::woken_ancestors_.
    };
    // One walk over the held wakes: notes whether any was for a strand
    // below `strand`, and records in `strand` each of its ancestors one
    // was for.
    WakesSeen SortWakesFor(Strand* strand) const;

   private:
    const std::size_t start_;
    const std::size_t outer_start_;  // The enclosing scope's start_.
  };

  // Called for every unit woken on this thread (by Strand::Schedule and
  // the scheduler's Schedule): when a strand's poll runs here
  // and `woken` is not that strand, remembers how many of the strand's
  // units were queued by then (they came before the wake). Its poll runs
  // those in this round: on a one-thread loop they run before the woken
  // unit (a future's done callback scheduled on a connection before the
  // wakeup of the task awaiting the future).
  static void NoteWake(const task::Task* woken);

  // Called by the target executor for a plain unit (one bound to no
  // strand) scheduled on this thread: if the innermost RunScope already
  // holds a wake, the unit is held behind it and handed to `target` in
  // order, so that what a step schedules keeps its order (a task it woke
  // on a strand runs before the callback it scheduled next, as on a
  // one-thread loop). Returns whether it took the unit. Remote wakes are
  // never held (their scheduler may block on them).
  static bool HoldBehindHeldWakes(task::Task* task, task::Executor* target,
                                  task::ScheduleKind kind);

 private:
  Strand(Strand* parent, Inherit inherit, std::uint64_t made_for);
  // The next unit, or nullptr when none is queued or the front one is held,
  // or (`*stopped` set) when it is numbered `stop_at` or later.
  task::Task* Pop(std::uint64_t stop_at, bool* stopped);
  // A RunScope's hand-over: the unit queued at `seq` may run; wakes us.
  void ReleaseHeld(std::uint64_t seq, task::ScheduleKind kind);
  // The gate. Enter every ancestor as a reader, nearest first; on an
  // ancestor that runs or waits to, queue on it (it wakes us) and back
  // out of the ones entered. Returns whether all were entered.
  bool EnterAncestors();
  // Whether our next unit (numbered `next_unit`) was queued after a unit
  // of ours woke `ancestor`, which has not run since; forgets the wakes
  // of `ancestor` it has run since. Under ancestor->gate_mu_.
  bool WaitsForRunOf(const Strand* ancestor, std::uint64_t next_unit);
  // The number of our first unit queued after a recorded wake of an
  // ancestor or a descendant.
  std::uint64_t QueuedBeforeRecordedWakes() const;
  // Forgets the woken descendants that have taken their woken unit off
  // their queue. If our next unit (numbered `next_unit`) was queued after
  // the wake of one that has not, queues us on it (the end of its next
  // poll wakes us) and returns true. Called where we run no unit.
  bool AwaitWokenDescendants(std::uint64_t next_unit);
  // Leaves the ancestors entered, below `stop` (nullptr: all of them); an
  // ancestor waiting for its last reader is woken.
  void LeaveAncestors(const Strand* stop);
  // Enters this strand as the writer: false (and marked waiting, woken by
  // the last reader leaving) while descendants run.
  bool EnterSelf();
  // Leaves it, waking the descendants that queued on it.
  void LeaveSelf();
  void WakeBlocked();
  // Takes a new wake-order ticket (see the class comment).
  void TakeTicket();

  Strand* const parent_;  // One reference, or nullptr.
  const Inherit inherit_;
  const std::uint64_t made_for_;

  // A queued unit; `held` while the RunScope of the unit that woke it is
  // open on another strand's worker (see RunScope).
  struct Queued {
    task::Task* task;
    bool held;
  };
  std::mutex mu_;
  std::deque<Queued> queue_;  // Guarded by mu_; one reference each.
  // Units ever taken off the queue's front: queue_[seq - popped_] is the
  // unit queued as number `seq`. Guarded by mu_.
  std::uint64_t popped_ = 0;
  // Units ever queued (popped_ + queue_.size()); written under mu_, read
  // without it by the strand's own poll thread when its unit wakes an
  // ancestor (the HeldWake remembers which of ours came before).
  std::atomic<std::uint64_t> pushed_{0};
  bool cancelled_ = false;         // Guarded by mu_.
  // pushed_ at the last wake of another unit that this poll's units made
  // (NoteWake); read only where the executor keeps rounds. Only the
  // thread polling this strand touches it.
  std::uint64_t queued_before_wake_ = 0;
  // Set by Schedule when the unit running in this strand's poll yields
  // (kYield: asyncio.sleep(0)); only that thread touches it.
  bool unit_yielded_ = false;
  // When the strand last became runnable, in the order of every strand's
  // wakes (a global counter); written under mu_, compared at its
  // ancestors' gates with theirs (a waiting writer's is its place in line).
  std::atomic<std::uint64_t> ticket_{0};

  std::mutex gate_mu_;
  int readers_ = 0;              // Running descendants. Guarded by gate_mu_.
  bool writer_running_ = false;  // Guarded by gate_mu_.
  bool writer_waiting_ = false;  // Guarded by gate_mu_.
  // Descendants that found us running or waiting; one reference each.
  std::vector<Strand*> blocked_;  // Guarded by gate_mu_.
  // Times the writer entered (or the strand was cancelled): a descendant
  // that woke us waits until it moves on (woken_ancestors_). Written under
  // gate_mu_; a running descendant may read it without (it cannot change
  // while one runs).
  std::atomic<std::uint64_t> writer_entries_{0};

  // The ancestors a unit of this strand woke, with their writer_entries_
  // at the time and the number of our units queued by then: a unit of
  // ours queued after the wake runs only after the ancestor has run once
  // since. A connection's data_received that wakes the task owning it is
  // followed, on a one-thread loop, by that task's step before the
  // connection's next callback (a task woken by a response finds the
  // transport open even if the peer closed right after it; aiohttp's
  // ws_connect() asserts so), while what was queued before the wake (a
  // connection_lost the close() before it scheduled) goes first. Only the
  // thread polling this strand touches it; the ancestors outlive it
  // (parent_ chain).
  struct WokenAncestor {
    Strand* strand;
    std::uint64_t writer_entries;
    std::uint64_t queued_before;
  };
  std::vector<WokenAncestor> woken_ancestors_;

  // The mirror image: the descendants a unit of this strand woke, with the
  // number of the woken unit in their queue and the number of our units
  // queued by then. A unit of ours queued after the wake runs only once the
  // descendant has taken the woken unit off its queue: on a one-thread loop
  // the callback a task's step scheduled on a connection it owns (the
  // connection_lost of a transport it closed) runs before the task's next
  // step. One reference each, dropped when the unit has run (a strand with
  // such a wake pending polls again after the descendant's next poll, to
  // look); only the thread polling this strand touches it.
  struct WokenDescendant {
    Strand* strand;
    std::uint64_t unit;
    std::uint64_t queued_before;
  };
  std::vector<WokenDescendant> woken_descendants_;
};

}  // namespace mt::runtime::scheduler

#endif  // MT_RUNTIME_SCHEDULER_STRAND_H_
