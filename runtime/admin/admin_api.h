#ifndef MT_RUNTIME_ADMIN_ADMIN_API_H_
#define MT_RUNTIME_ADMIN_ADMIN_API_H_

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "runtime/admin/snapshot.h"

namespace mt::runtime::admin {

// What the control plane may ask of a live runtime. The core extension
// exports a pointer to an implementation in a PyCapsule named
// kAdminApiCapsuleName; the control extension (which links gRPC and OpenSSL)
// reaches the runtime only through it, so the core is never linked twice and
// the two TLS libraries never share a symbol scope. Bump the version in the
// capsule name on any change to this class or to the snapshot structs.
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
  // Starts a coordinated shutdown with `grace` for in-flight work and
  // returns at once; FailedPrecondition if one is already under way.
  virtual absl::Status BeginShutdown(std::chrono::milliseconds grace) = 0;
};

inline constexpr char kAdminApiCapsuleName[] = "mt_asyncio._core._admin_api_v2";

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_ADMIN_API_H_
