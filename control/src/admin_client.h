#ifndef MT_CONTROL_SRC_ADMIN_CLIENT_H_
#define MT_CONTROL_SRC_ADMIN_CLIENT_H_

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "runtime/admin/admin_abi.h"

namespace mt::control {

// The control extension's side of the admin boundary: calls the core's
// C function table and converts between its JSON documents and the
// mt.control.v1 messages (proto field names; unknown fields ignored, so an
// older control extension works with a newer core).
class AdminClient {
 public:
  // `abi` must outlive the client and have been checked by Check().
  explicit AdminClient(const MtAdminAbi* abi) : abi_(abi) {}

  // Whether a table exported by a core can be used by this build: the
  // same ABI version and at least the functions this build calls. Returns
  // an error message, or "" when usable.
  static std::string Check(const MtAdminAbi* abi);

  // `method` with `request` (as JSON) answered into `response`.
  grpc::Status Call(std::string_view method, const google::protobuf::Message& request,
                    google::protobuf::Message* response) const;
  // The same with a raw JSON request (for internal methods without a
  // request message).
  grpc::Status CallJson(std::string_view method, std::string_view request_json,
                        google::protobuf::Message* response) const;
 private:
  // The raw answer: OK with its JSON document in `body`, or the error.
  grpc::Status Raw(std::string_view method, std::string_view request_json,
                   std::string* body) const;

  const MtAdminAbi* abi_;
};

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_ADMIN_CLIENT_H_
