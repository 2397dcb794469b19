#ifndef MT_PYEXT_SRC_LOOP_LOOP_STATE_H_
#define MT_PYEXT_SRC_LOOP_LOOP_STATE_H_

// What the files implementing mt_asyncio._core.Loop share: the loop's
// state and the pieces of its type defined outside loop.cc (handles,
// done-callback batches, the task registry and task creation, the
// blocking-pool bridge). Everything else goes through loop.h.

#include <Python.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pyext/src/future/future.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/strand.h"
#include "runtime/task/task.h"

namespace mt::pyext::loop_internal {

namespace task = runtime::task;
using Clock = std::chrono::steady_clock;

// Guards one registry shard: a few pointer writes per task creation and
// completion. A pthread mutex cost more than the list update itself (the
// unlock alone was ~5% of one_million); contention is rare (16 shards), so
// a waiter spins briefly and then yields its core.
class ShardLock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

struct LoopState {
  std::shared_ptr<runtime::Runtime> runtime;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false;         // Guarded by mu.
  bool stop_requested = false;  // Guarded by mu.
  bool closed = false;          // Guarded by mu.
  std::vector<task::Task*> deferred;  // Guarded by mu; one reference each.
  // Callables the thread in run_forever() runs for the workers (what only
  // the main thread may do: signal.signal, set_wakeup_fd). Guarded by mu;
  // one reference each.
  std::vector<PyObject*> runner_calls;
  // A SystemExit or KeyboardInterrupt a callback or step raised, for the
  // thread in run_forever() to raise (stdlib lets these escape
  // run_forever; a worker has no caller to raise into). The first one
  // wins until it is raised. Guarded by mu; strong.
  PyObject* runner_exc = nullptr;
  std::atomic<bool> running_flag{false};
  // A SystemExit/KeyboardInterrupt is on its way to the thread in
  // run_forever(): stdlib's loop stops at once, running nothing more, so
  // units polled from now on wait for the next run (LoopDeferIfStopped).
  // Set with runner_exc; cleared when run_forever() returns.
  std::atomic<bool> exit_pending{false};
  // threading.get_ident() of the thread in run_forever() while it runs
  // the loop, else 0: what Python code in the loop's steps and callbacks
  // is told its thread is (loop_thread_identity.cc).
  std::atomic<unsigned long> home_ident{0};
  // How many worker (or stand-in) threads refer to the loop through their
  // running loop and asyncgen hooks (LoopEnterOnWorker). Shared, so a
  // thread lets go of the loop first and counts down after, when the loop
  // may be gone: close() waits for zero, so the loop of asyncio.run() is
  // free once run() returns (anyio's
  // test_asyncio_run_does_not_leak_event_loop checks at once).
  std::shared_ptr<std::atomic<int>> worker_holders = std::make_shared<std::atomic<int>>(0);
  // run_in_executor(None, ...) jobs handed to the blocking pool and not yet
  // over (returned, skipped or dropped): shutdown_default_executor() waits
  // for zero, as stdlib's joins its executor's threads. Shared, because a
  // job may end after the loop is gone.
  std::shared_ptr<std::atomic<std::int64_t>> blocking_jobs =
      std::make_shared<std::atomic<std::int64_t>>(0);
  // Under compat.install()'s serial tasks: the strand every main task of
  // the loop (asyncio.run(), Runner.run(), run_until_complete()) runs on,
  // made on first use (LoopSerialStrand). What is scheduled from outside
  // any strand of this loop (another thread's call_soon_threadsafe /
  // run_coroutine_threadsafe, a step of another loop) joins it, as
  // everything shares one thread on stdlib's loop: anyio's portal tasks
  // touch its cancel scopes' sets with the program's own tasks. Set once
  // and read without a lock; serial_strands holds the loop's reference
  // until the loop is freed.
  std::atomic<runtime::scheduler::Strand*> serial_strand{nullptr};
  std::vector<runtime::scheduler::Strand*> serial_strands;  // Guarded by mu.
  // Debug mode: callbacks are checked when scheduled (stdlib does the same
  // only in debug mode; otherwise a bad callback fails when it runs).
  std::atomic<bool> debug{false};
  // Debug mode logs callbacks and steps that run at least this long
  // (slow_callback_duration; stdlib's default is 0.1 s).
  std::atomic<std::int64_t> slow_callback_ns{100'000'000};
  // Steps and callbacks debug mode found slow (for the control plane).
  std::atomic<std::uint64_t> slow_steps{0};
  std::atomic<bool> closed_flag{false};  // Mirrors `closed`, read lock-free.
  // Whether the loop object has a task factory: create_task reads this
  // instead of taking the loop's critical section (one lock every worker's
  // create_task would meet) in the usual case of none.
  std::atomic<bool> has_task_factory{false};
  // Pending tasks, for all_tasks(): intrusive lists (no allocation, no
  // hashing). A task goes in the shard of the thread that registers it and
  // leaves from the one its link names. Tasks are usually made and
  // finished by one worker, so a worker's registrations and removals touch
  // its own shard's lock and list neighbours; sharded by address instead,
  // every registration and removal wrote a cache line another worker had
  // just written (churn at two workers paid it on every task). Entries are
  // borrowed: a task is registered from creation until it completes (or
  // is dropped unrun), and all that time its step unit holds it alive.
  static constexpr std::size_t kTaskShards = 16;
  struct alignas(64) TaskShard {
    TaskShard() { head.prev = head.next = &head; }
    ShardLock mu;
    TaskLink head;  // Circular list sentinel.
    std::uint64_t registered = 0;  // Tasks ever registered; guarded by mu.
    std::uint64_t live = 0;        // Registered now; guarded by mu.
  };
  TaskShard task_shards[kTaskShards];
  // File descriptors registered for add_reader/add_writer and transports.
  FdTable fds;
  // The calling thread's shard: threads are numbered in the order they
  // first register a task (any loop), so up to kTaskShards threads each
  // have one of their own.
  static std::uint32_t ThisThreadsShard();
};

struct LoopObject {
  PyObject_HEAD
  LoopState* st;
  PyObject* weakreflist;
  PyObject* task_factory;  // Strong, or nullptr for the default.
};

inline LoopState* StateOf(PyObject* loop) {
  return reinterpret_cast<LoopObject*>(loop)->st;
}

// The loop's clock: time.monotonic()'s, in seconds.
double NowSeconds();

// Runs fn(*args) inside `ctx` (which may be nullptr: the current context).
PyObject* CallInContext(PyObject* ctx, PyObject* fn, PyObject* const* args,
                        std::size_t nargs);

// --- handle.cc: Handle and TimerHandle ---

// Adds Handle and TimerHandle to `module`. 0, or -1 with an error.
int RegisterHandleTypes(PyObject* module);
// call_soon: a Handle for callback(*args) in `context` (all borrowed), run
// on a worker soon. New reference, or nullptr with an error.
PyObject* ScheduleSoon(PyObject* loop, PyObject* callback, PyObject* args,
                       PyObject* context);
// call_at: a TimerHandle run at loop time `when`. New reference, or nullptr.
PyObject* ScheduleAt(PyObject* loop, double when, PyObject* callback,
                     PyObject* args, PyObject* context, bool when_is_int = false);

// --- callback_batch.cc ---

// The future hook that runs a completed future's done callbacks on one of
// `loop`'s workers (FutureHooks::schedule_batch).
int ScheduleBatch(PyObject* loop, PyObject* fut, std::vector<Callback>& cbs);

// --- loop_tasks.cc: task creation and the task registry ---

// Remembers the Loop type's own create_task (LoopOverridesCreateTask).
int InitTaskCreation(PyTypeObject* loop_type);
PyObject* Loop_create_future(PyObject* self, PyObject*);
PyObject* Loop_create_task(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                           PyObject* kwnames);
PyObject* Loop_set_task_factory(PyObject* self, PyObject* factory);
PyObject* Loop_get_task_factory(PyObject* self, PyObject*);
PyObject* Loop_get_task_factory_attr(PyObject* self, void*);
PyObject* Loop_all_tasks(PyObject* self, PyObject*);
PyObject* Loop_mt_counts(PyObject* self, PyObject* by_state_arg);

// --- loop_blocking.cc ---

PyObject* Loop_run_blocking(PyObject* self, PyObject* const* args, Py_ssize_t nargs);
PyObject* Loop_blocking_jobs(PyObject* self, PyObject* unused);

}  // namespace mt::pyext::loop_internal

#endif  // MT_PYEXT_SRC_LOOP_LOOP_STATE_H_
