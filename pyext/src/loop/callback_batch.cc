// A completed future's done callbacks, run together as one runtime unit.

#include <utility>
#include <vector>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/future/future.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/loop_state.h"

namespace mt::pyext {

using loop_internal::CallInContext;
namespace task = runtime::task;

namespace {

// Runs a completed future's done callbacks on one worker, in registration
// order, each in its own context.
class CallbackBatch final : public task::Task {
 public:
  CallbackBatch(PyObject* loop, PyObject* fut, std::vector<Callback> cbs)
      : Task(/*scheduled=*/false),
        loop_(Py_NewRef(loop)),
        fut_(Py_NewRef(fut)),
        cbs_(std::move(cbs)) {
    ClaimForLoop(loop, this);
  }
  ~CallbackBatch() override {
    for (Callback& cb : cbs_) {
      DecRefAnyThread(cb.fn);
      DecRefAnyThread(cb.ctx);
    }
    DecRefAnyThread(fut_);
    DecRefAnyThread(loop_);
  }
  bool Poll() override {
    if (LoopDeferIfStopped(loop_, this)) return false;
    if (LoopEnterOnWorker(loop_) < 0) {
      PyErr_WriteUnraisable(loop_);
      return true;
    }
    StopAfterCallback stop_after(loop_);
    for (Callback& cb : cbs_) {
      SlowCallbackCheck check(loop_);
      PyObject* res = CallInContext(cb.ctx, cb.fn, &fut_, 1);
      check.Done(cb.fn);
      if (res == nullptr) {
        // Reported in the callback's context, as asyncio's handle does, so
        // a custom exception handler sees what the callback set.
        PyObject* exc = PyErr_GetRaisedException();
        const bool entered = cb.ctx != nullptr && PyContext_Enter(cb.ctx) == 0;
        if (!entered) PyErr_Clear();
        PyErr_SetRaisedException(exc);
        LoopReportException(loop_, "Exception in callback ", cb.fn, nullptr,
                            nullptr);
        if (entered && PyContext_Exit(cb.ctx) < 0) PyErr_WriteUnraisable(loop_);
      } else {
        Py_DECREF(res);
      }
    }
    return true;
  }

 private:
  PyObject* loop_;
  PyObject* fut_;
  std::vector<Callback> cbs_;
};

}  // namespace

namespace loop_internal {

int ScheduleBatch(PyObject* loop, PyObject* fut, std::vector<Callback>& cbs) {
  if (!IsLoop(loop)) return 0;
  auto* unit = new CallbackBatch(loop, fut, std::move(cbs));
  cbs.clear();
  LoopWake(loop, unit);
  unit->Unref();  // The loop (or the runtime) holds it now.
  return 1;
}

}  // namespace loop_internal
}  // namespace mt::pyext
