#ifndef MT_PYEXT_SRC_LOOP_TASK_OBJECT_H_
#define MT_PYEXT_SRC_LOOP_TASK_OBJECT_H_

// Inside the loop package only: the Task object's layout and the unit that
// steps it, shared by the step machinery (task_step.cc) and the Python
// type (task.cc). Everyone else goes through task.h.

#include <Python.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/common/runtime_holder.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"
#include "runtime/metrics/cycle_clock.h"
#include "runtime/task/task.h"

namespace mt::pyext::task_internal {

namespace rt_task = runtime::task;

class TaskUnit;

struct TaskObject {
  FutureObject base;
  PyObject* coro;
  PyObject* context;
  PyObject* name;        // str, or nullptr until first asked ("Task-N").
  PyObject* fut_waiter;  // What the task waits for, or nullptr.
  PyObject* must_cancel_msg;
  PyObject* step_exc;    // Thrown into the coroutine at the next step.
  bool must_cancel;
  int num_cancels_requested;
  std::uint64_t number;
  TaskUnit* unit;  // One reference; the unit steps this task.
  TaskLink registry_link;  // In the loop's all_tasks registry.
};

inline TaskObject* AsTask(PyObject* o) { return reinterpret_cast<TaskObject*>(o); }

// Steps its task on a worker. Holds the task strongly until the task is
// done (the task holds the unit back; the cycle ends with the task). The
// loop is borrowed from the task, which keeps it alive: a reference of the
// unit's own would be one more atomic increment and decrement per task on
// the loop object, shared by every worker.
//
// Its hold on the task sits in the task's shared refcount (NewSharedRef),
// as the task usually finishes on another worker than the one that made
// it; when the making thread is the runtime's only worker it will finish
// here, and a plain local reference saves the two atomic operations. (A
// resize before it finishes only makes that drop take the shared path.)
class TaskUnit final : public rt_task::Task {
 public:
  TaskUnit(PyObject* loop, PyObject* task, bool finishes_here)
      : Task(/*scheduled=*/false),
        loop_(loop),
        task_(finishes_here ? Py_NewRef(task) : NewSharedRef(task)),
        shared_ref_(!finishes_here),
        created_cycles_(runtime::metrics::CycleClock::Now()) {
    ClaimForLoop(loop, this);
  }
  ~TaskUnit() override { DropTaskAnyThread(task_); }

#ifdef Py_GIL_DISABLED
  // Free-threaded builds: from CPython's allocator, mimalloc, whose free
  // works on any thread. A unit is made by the worker that creates its task
  // and freed by the one that finishes it; glibc's malloc took ~4% of
  // one_million on that pattern (arena locks, bin consolidation). GIL
  // builds keep operator new: PyMem_Free needs the GIL there, and a unit
  // may be freed on a thread that does not hold it.
  static void* operator new(std::size_t size) noexcept { return PyMem_Malloc(size); }
  static void operator delete(void* p) { PyMem_Free(p); }
#endif
  // One step of the task (task_step.cc); true once the task is done.
  bool Poll() override;
  // The runtime or a closed loop dropped the step unrun.
  void OnCancel() override;

 private:
  // Drops task_'s reference the way it was taken.
  void DropTask(PyObject* task) const {
    if (shared_ref_) {
      DropSharedRef(task);
    } else {
      Py_DECREF(task);
    }
  }
  void DropTaskAnyThread(PyObject* task) const {
    DropOnAnyThread(task, [this](PyObject* t) { DropTask(t); });
  }

 public:
  // What the control plane shows of a task (_mt_stats). Written only by
  // the worker stepping it (one at a time), read by anyone: relaxed
  // atomics as plain loads and stores, no read-modify-write.
  struct Stats {
    std::uint64_t steps;
    std::uint64_t self_wakes;  // Steps that ended in a bare yield (sleep(0)).
    std::uint64_t busy_cycles;
    std::uint64_t created_cycles;
    int last_worker;
  };
  Stats stats() const {
    return {steps_.load(std::memory_order_relaxed), self_wakes_.load(std::memory_order_relaxed),
            busy_cycles_.load(std::memory_order_relaxed), created_cycles_,
            last_worker_.load(std::memory_order_relaxed)};
  }
  // The step in progress ends in a bare yield: the task wakes itself. By
  // the stepping worker only, like the other counters.
  void CountSelfWake() {
    self_wakes_.store(self_wakes_.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  }

 private:
  void CountStep(std::uint64_t cycles) {
    steps_.store(steps_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    busy_cycles_.store(busy_cycles_.load(std::memory_order_relaxed) + cycles,
                       std::memory_order_relaxed);
    last_worker_.store(this_worker_index, std::memory_order_relaxed);
  }

  PyObject* loop_;  // Borrowed; valid while task_ is held.
  PyObject* task_;
  const bool shared_ref_;  // How task_ was taken (NewSharedRef or Py_NewRef).
  const std::uint64_t created_cycles_;
  std::atomic<std::uint64_t> steps_{0};
  std::atomic<std::uint64_t> self_wakes_{0};
  std::atomic<std::uint64_t> busy_cycles_{0};
  std::atomic<int> last_worker_{-1};
};

// The steps (task_step.cc).

// One step. Returns true when the task is done.
bool StepTask(PyObject* self);
// FutureHooks::wake_task: the awaited future is done, step again.
void WakeTask(PyObject* self);
// Cancels what a task waits for: 1 cancelled, 0 it was done, -1 error.
int CancelWaiter(PyObject* waiter, PyObject* msg);
// Imports what a step calls (asyncio's _enter_task and the like). 0, or
// -1 with an error set.
int InitTaskSteps();

}  // namespace mt::pyext::task_internal

#endif  // MT_PYEXT_SRC_LOOP_TASK_OBJECT_H_
