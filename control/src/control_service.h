#ifndef MT_CONTROL_SRC_CONTROL_SERVICE_H_
#define MT_CONTROL_SRC_CONTROL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mt/control/v1/control.grpc.pb.h"
#include "runtime/admin/admin_api.h"

namespace mt::control {

// mt.control.v1.RuntimeControl over the runtime's admin interface. Handlers
// run on gRPC's threads and never touch the interpreter, so they answer
// while every worker is busy.
class ControlService final : public v1::RuntimeControl::Service {
 public:
  // `admin` must outlive the service. `interpreter` is fixed at start.
  ControlService(const runtime::admin::AdminApi* admin,
                 v1::InterpreterInfo interpreter);

  grpc::Status GetInfo(grpc::ServerContext* context,
                       const v1::GetInfoRequest* request,
                       v1::GetInfoResponse* response) override;

 private:
  const runtime::admin::AdminApi* admin_;
  const v1::InterpreterInfo interpreter_;
};

// Copies an admin snapshot into its wire form.
void FillRuntimeInfo(const runtime::admin::RuntimeSnapshot& snap,
                     v1::RuntimeInfo* out);

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_CONTROL_SERVICE_H_
