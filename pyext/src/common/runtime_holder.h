#ifndef MT_PYEXT_SRC_COMMON_RUNTIME_HOLDER_H_
#define MT_PYEXT_SRC_COMMON_RUNTIME_HOLDER_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>

#include "runtime/admin/admin_api.h"
#include "runtime/config.h"
#include "runtime/runtime.h"

namespace mt::pyext {

// The index of the runtime worker this thread is (-1 elsewhere), set when
// the worker starts: a thread-local read, for what runs on every step.
extern thread_local int this_worker_index;

// Owns the process-wide Runtime and ties its workers to the interpreter.
//
// Workers attach to the interpreter when they start and stay attached while
// they run units; they detach before parking and around shutdown, so a
// parked worker never holds the GIL (GIL builds) nor blocks a stop-the-world
// pause (free-threaded builds). The holder is also the AdminApi behind the
// capsule, and answers with a "created" snapshot when no runtime runs.
class RuntimeHolder final : public runtime::admin::AdminApi {
 public:
  static RuntimeHolder& Instance();

  // Raises RuntimeError if a runtime is already running. Needs the caller
  // attached to the interpreter.
  void Start(runtime::Config config);
  // Joins the workers with the caller detached. Safe to call repeatedly.
  void Shutdown();
  // Raises RuntimeError when no runtime is running.
  void SpawnCallable(pybind11::object fn);
  bool IsWorkerThread() const;
  // The running runtime, starting one with the default configuration if
  // none runs (what an event loop needs). Needs the caller attached.
  std::shared_ptr<runtime::Runtime> EnsureStarted();
  std::shared_ptr<runtime::Runtime> current() const;

  // admin::AdminApi, forwarded to the running runtime (FailedPrecondition
  // when none runs).
  runtime::admin::RuntimeSnapshot Snapshot() const override;
  absl::Status ResizeWorkers(std::size_t workers) override;
  absl::Status SetBlockingThreadsMax(std::size_t max_threads) override;
  absl::Status SetBlockingIdleTtl(std::chrono::milliseconds idle_ttl) override;
  absl::Status BeginShutdown(std::chrono::milliseconds grace) override;

  // What a worker runs, attached, each time before it parks: the loop
  // layer lets go of a closed loop the worker still refers to (its running
  // loop and asyncgen hooks). Set once at module init; may be nullptr.
  using BeforeParkFn = void (*)();
  static void SetBeforePark(BeforeParkFn fn);

  // Where the stall detector's reports go (on the supervisor thread, which
  // must not touch the interpreter). Set once at module init; nullptr: the
  // stalls are only counted.
  using StallSinkFn = void (*)(const runtime::admin::StallReport&);
  static void SetStallSink(StallSinkFn fn);

  // In a child made by fork(): forgets the parent's runtime (its threads
  // did not come along), so the child's loops start their own.
  void AfterForkInChild();

  // What the Python layer runs when a coordinated shutdown begins (a drain
  // hook of every runtime started from now on): called with the grace in
  // seconds, on the thread running the shutdown, attached for the call.
  // It winds down the loops that run (mt_asyncio.runners). Needs the
  // caller attached; None clears it.
  void SetDrainCallback(pybind11::object fn);

 private:
  static void RunDrainCallback(double grace_seconds);

  mutable std::mutex mu_;
  std::shared_ptr<runtime::Runtime> runtime_;  // Guarded by mu_.
};

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_RUNTIME_HOLDER_H_
