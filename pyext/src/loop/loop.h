#ifndef MT_PYEXT_SRC_LOOP_LOOP_H_
#define MT_PYEXT_SRC_LOOP_LOOP_H_

#include <Python.h>

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "runtime/runtime.h"
#include "runtime/scheduler/strand.h"
#include "runtime/task/task.h"

namespace mt::pyext {

struct FdTable;

// mt_asyncio._core.Loop: the C++ core of the parallel event loop. The
// Python class mt_asyncio.base_events.EventLoop derives from it and adds
// the slower parts of the asyncio API.
//
// Work for the loop (handles, task steps, done-callback batches) is a
// runtime task. While the loop runs it goes straight to the runtime's
// workers; while it is stopped it waits in the loop's deferred list, and a
// unit a worker picks up after a stop goes back there: as with stdlib
// asyncio, nothing of a loop starts while the loop is not running. (A unit
// already running on another worker when stop() is called finishes there,
// possibly after run_forever() has returned: stdlib's loop would have run
// it before returning.)

// Adds Loop, Handle and TimerHandle to `module`. 0, or -1 with an error.
int RegisterLoopTypes(PyObject* module);

bool IsLoop(PyObject* obj);

// Makes `unit` (an idle runtime task whose reference the loop now shares)
// runnable: woken now if the loop runs, else deferred until it does. A
// unit not bound to an executor yet is bound to LoopExecutor(loop).
void LoopWake(PyObject* loop, runtime::task::Task* unit);

// Marks `unit` as one of `loop`'s (task::Task::domain): a stand-in worker
// runs none of a loop's units while one of them holds a worker, so a
// blocked step's loop still runs one unit at a time. Before its first wake.
inline void ClaimForLoop(PyObject* loop, runtime::task::Task* unit) {
  unit->set_domain(reinterpret_cast<std::uintptr_t>(loop));
}

// While one of these is alive on a thread, the first steps of tasks that
// thread creates are held back, then queued together in creation order
// when the scope ends. gather() makes its children inside one: stdlib runs
// none of them before gather() returns either, so nothing a user observes
// changes, but children no longer start on other workers while their
// siblings are still being made. Started at once, a stealing worker ran
// each child moments after its creation, pulling the fresh objects' cache
// lines away from the creating worker, and most children finished before
// gather() attached its callback, costing each a scheduled callback:
// one_million was slower at 2 workers than at 1. Scopes nest; each queues
// what it held back.
class HeldFirstSteps {
 public:
  HeldFirstSteps();
  ~HeldFirstSteps();
  HeldFirstSteps(const HeldFirstSteps&) = delete;
  HeldFirstSteps& operator=(const HeldFirstSteps&) = delete;

  // For a new task's first step: true if a scope on this thread now holds
  // `unit` (which must stay unscheduled until then), else false and the
  // caller wakes it with LoopWake. `task` owns `unit` (and a reference to
  // `loop`).
  static bool Hold(PyObject* loop, PyObject* task, runtime::task::Task* unit);

 private:
  struct Held {
    PyObject* loop;  // Borrowed: the task holds it.
    // A reference to the task, which keeps its unit: a Python reference,
    // local to the thread that just made the task, costs no atomic
    // operation, where one of the unit's own would cost two.
    PyObject* task;
    runtime::task::Task* unit;  // Borrowed: the task holds it.
  };
  // Inline room for the one task TaskGroup.create_task() and shield()
  // hold; gather() holds as many as it has children.
  absl::InlinedVector<Held, 2> held_;
  HeldFirstSteps* outer_;
};

// The loop's registry of pending tasks (all_tasks): an intrusive list
// node embedded in each task. A task is registered while its step unit
// holds it alive; unregistering twice is harmless.
struct TaskLink {
  TaskLink* prev = nullptr;
  TaskLink* next = nullptr;
  PyObject* owner = nullptr;  // Borrowed.
  std::uint32_t shard = 0;    // The registry shard it was put in.
};
void LoopRegisterTask(PyObject* loop, PyObject* task, TaskLink* link);
void LoopUnregisterTask(PyObject* loop, TaskLink* link);

// Whether `loop`'s type overrides create_task (1), or LoopCreateTaskCore
// may stand in for loop.create_task(coro) (0); -1 on error. One type
// lookup: callers making many tasks ask once.
int LoopOverridesCreateTask(PyObject* loop);
// The core's create_task(coro), without a Python call. New reference, or
// nullptr with an error.
PyObject* LoopCreateTaskCore(PyObject* loop, PyObject* coro);

// Eager start: if `loop` is running on this thread, claims `unit` (idle,
// never scheduled) and runs its first step right here, then returns true;
// a step that does not finish the task leaves it scheduled or waiting as
// usual. Returns false (nothing done) when the loop runs elsewhere or not
// at all.
bool LoopStartEagerly(PyObject* loop, runtime::task::Task* unit);

// Debug mode's slow-callback check: construct before running a callback
// or a task step, call Done after; if the loop is in debug mode and the run
// took at least slow_callback_duration, logs stdlib's "Executing %s took
// %.3f seconds" warning on asyncio's logger. Costs one flag load otherwise.
class SlowCallbackCheck {
 public:
  explicit SlowCallbackCheck(PyObject* loop);
  void Done(PyObject* what);

 private:
  PyObject* loop_;              // Borrowed.
  std::int64_t start_ns_ = -1;  // -1: not in debug mode.
};

// Marks a callback or step of `loop` running on this thread: a stop()
// it calls takes effect when the scope ends, after the callback returned
// and any error it raised was reported, as stdlib's stop() only sets a
// flag its run loop reads once the callback is done. Scopes nest.
class StopAfterCallback {
 public:
  explicit StopAfterCallback(PyObject* loop);
  ~StopAfterCallback();
  StopAfterCallback(const StopAfterCallback&) = delete;
  StopAfterCallback& operator=(const StopAfterCallback&) = delete;

  // stop() for `loop`: true if a scope of this thread took it (to carry
  // out when it ends).
  static bool Defer(PyObject* loop);

 private:
  PyObject* const loop_;  // Borrowed: the unit running holds it.
  StopAfterCallback* const outer_;
  bool stop_requested_ = false;
};

// The loop's serial strand (LoopState::serial_strand; a new reference),
// made on first use: what every serial main task of the loop runs on
// (serial_tasks.cc), and what work scheduled on `loop` from outside its
// strands joins. One per loop, so the tasks of successive
// run_until_complete() calls (anyio's and aiohttp's test runners keep one
// task across calls) step one at a time with each other too. The loop
// keeps a reference until it is freed.
runtime::scheduler::Strand* LoopSerialStrand(PyObject* loop);

// The loop whose unit this worker polls now (borrowed; nullptr on threads
// that are not workers, or before a worker's first unit).
PyObject* LoopOfThisWorker();
// Drops that pointer without touching the thread's running loop: for a
// forked child, whose only thread is no longer a worker.
void ForgetLoopOfThisWorker();
// Adds _core.loop_thread_ident (loop_thread_identity.cc) to the module.
int RegisterLoopThreadIdentity(PyObject* module);

// True if this thread is one of `loop`'s workers inside a step or callback.
bool LoopRunsOnThisThread(PyObject* loop);
// Whether this thread is the only worker of the runtime that runs `loop`
// (and runs it now): a task made here will almost surely finish here.
bool LoopRunsOnlyOnThisThread(PyObject* loop);

// Called from a unit's Poll: if the loop is not running, parks the unit in
// the deferred list (it returns "not finished" and is woken when the loop
// runs again) and returns true; if the loop is closed, cancels the unit
// instead (it takes its cancel path when the poll returns).
bool LoopDeferIfStopped(PyObject* loop, runtime::task::Task* unit);

// Makes `loop` the running loop of the calling worker thread if it is not
// already (asyncio.get_running_loop() must answer inside every step).
// Returns 0, or -1 with an error set.
int LoopEnterOnWorker(PyObject* loop);

// The runtime behind `loop` (started with it).
runtime::Runtime& LoopRuntime(PyObject* loop);
// 0 while the loop's runtime can run work; -1 with RuntimeError once it
// has shut down (a loop never moves to a newer runtime).
int LoopCheckRuntime(PyObject* loop);
// Where a unit made now for `loop` is bound: the connection strand the
// calling thread runs (transport.h), so that what a connection's callbacks
// start stays serialized with them, else the runtime's scheduler.
runtime::task::Executor* LoopExecutor(PyObject* loop);
// The loop's table of registered file descriptors (fd_watch.h).
FdTable& LoopFds(PyObject* loop);

// A new Handle for callback(*args) in `context` (a tuple and a Context;
// both borrowed), and running one as a loop callback would: in its
// context, an exception going to the loop's handler. New reference or
// nullptr.
PyObject* LoopNewHandle(PyObject* loop, PyObject* callback, PyObject* args,
                        PyObject* context);
void LoopRunHandle(PyObject* loop, PyObject* handle);
// Runs `handle` soon on `executor` (a strand, say), as call_soon would.
void LoopScheduleHandle(PyObject* loop, PyObject* handle,
                        runtime::task::Executor* executor);
// Marks a Handle cancelled (Handle.cancel()).
void LoopCancelHandle(PyObject* handle);

// Reports an exception from a callback or step to the loop's exception
// handler; consumes the current error. `what` names the failed object.
// A SystemExit or KeyboardInterrupt is not reported: it goes to
// LoopRaiseInRunner.
void LoopReportException(PyObject* loop, const char* message_prefix,
                         PyObject* what, PyObject* extra_key,
                         PyObject* extra_value);

// In `loop`'s debug mode (one of ours), where the calling Python code is:
// asyncio.format_helpers.extract_stack() from the innermost Python frame,
// what stdlib keeps as a future's, task's or handle's _source_traceback
// (a new reference). nullptr otherwise, and when it cannot be had (no
// Python frame, an error: cleared), so creating an object never fails
// for it.
PyObject* LoopSourceTraceback(PyObject* loop);

// True for SystemExit and KeyboardInterrupt: what stdlib's loop never
// swallows into an error report.
bool IsExitException(PyObject* exc);
// Hands `exc` (a SystemExit or KeyboardInterrupt; consumed) to the thread
// in run_forever(), which raises it and so stops the loop, as stdlib's
// run_forever lets these escape. Raised at the next run when none runs.
void LoopRaiseInRunner(PyObject* loop, PyObject* exc);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_LOOP_H_
