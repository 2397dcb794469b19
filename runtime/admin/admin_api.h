#ifndef MT_RUNTIME_ADMIN_ADMIN_API_H_
#define MT_RUNTIME_ADMIN_ADMIN_API_H_

#include "runtime/admin/snapshot.h"

namespace mt::runtime::admin {

// What the control plane may ask of a live runtime. The core extension
// exports a pointer to an implementation in a PyCapsule named
// kAdminApiCapsuleName; the control extension (which links gRPC and OpenSSL)
// reaches the runtime only through it, so the core is never linked twice and
// the two TLS libraries never share a symbol scope. Bump the version in the
// capsule name on any change to this class or to the snapshot structs.
class AdminApi {
 public:
  virtual ~AdminApi() = default;
  // Safe from any thread, including threads unknown to the runtime and
  // while every worker is busy: it never waits for a worker.
  virtual RuntimeSnapshot Snapshot() const = 0;
};

inline constexpr char kAdminApiCapsuleName[] = "mt_asyncio._core._admin_api_v1";

}  // namespace mt::runtime::admin

#endif  // MT_RUNTIME_ADMIN_ADMIN_API_H_
