#ifndef MT_RUNTIME_ADMIN_ADMIN_API_H_
#define MT_RUNTIME_ADMIN_ADMIN_API_H_

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "runtime/admin/snapshot.h"

namespace mt::runtime::admin {

// What the control plane may ask of a live runtime.
//
// The core reaches it in-process; the control extension goes through the
// C boundary of admin_abi.h instead.
//
// Every method is safe from any thread, including threads unknown to the
// runtime and while every worker is busy: none waits for a worker.
class AdminApi {
 public:
  virtual ~AdminApi() = default;
  virtual RuntimeSnapshot Snapshot() const = 0;
  // Live resize of the worker pool (InvalidArgument outside [1, max]).
  virtual absl::Status ResizeWorkers(std::size_t workers) = 0;
  // Live change of the blocking pool's cap (InvalidArgument for 0).
  virtual absl::Status SetBlockingThreadsMax(std::size_t max_threads) = 0;
  // Live change of the blocking pool's idle TTL (InvalidArgument if <= 0).
  virtual absl::Status SetBlockingIdleTtl(std::chrono::milliseconds idle_ttl) = 0;
  // Starts a coordinated shutdown with `grace` for in-flight work and
  // returns at once; FailedPrecondition if one is already under way.
  virtual absl::Status BeginShutdown(std::chrono::milliseconds grace) = 0;
};

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_ADMIN_API_H_
