#include "control/src/admin_client.h"

#include <google/protobuf/util/json_util.h>

#include <cstddef>

namespace mt::control {

std::string AdminClient::Check(const MtAdminAbi* abi) {
  if (abi == nullptr) return "no admin table";
  if (abi->abi_version != kMtAdminAbiVersion) {
    return "the core's admin boundary is version " + std::to_string(abi->abi_version) +
           ", this control extension speaks version " + std::to_string(kMtAdminAbiVersion);
  }
  if (abi->struct_size < offsetof(MtAdminAbi, free_response) + sizeof(abi->free_response) ||
      abi->call == nullptr || abi->free_response == nullptr) {
    return "the core's admin table is too small for this control extension";
  }
  return "";
}

grpc::Status AdminClient::Raw(std::string_view method, std::string_view request_json,
                              std::string* body) const {
  MtAdminResponse r =
      abi_->call(method.data(), method.size(), request_json.data(), request_json.size());
  std::string text(r.body != nullptr ? r.body : "", r.body_size);
  const int code = r.code;
  abi_->free_response(&r);
  if (code == 0) {
    *body = std::move(text);
    return grpc::Status::OK;
  }
  // The boundary's codes are gRPC's canonical ones.
  const auto grpc_code = code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED
                             ? static_cast<grpc::StatusCode>(code)
                             : grpc::StatusCode::INTERNAL;
  return grpc::Status(grpc_code, text);
}

grpc::Status AdminClient::CallJson(std::string_view method, std::string_view request_json,
                                   google::protobuf::Message* response) const {
  std::string body;
  grpc::Status status = Raw(method, request_json, &body);
  if (!status.ok()) return status;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto parsed = google::protobuf::util::JsonStringToMessage(body, response, options);
  if (!parsed.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the core's answer to " + std::string(method) +
                            " does not parse: " + parsed.ToString());
  }
  return grpc::Status::OK;
}

grpc::Status AdminClient::Call(std::string_view method,
                               const google::protobuf::Message& request,
                               google::protobuf::Message* response) const {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const auto printed = google::protobuf::util::MessageToJsonString(request, &json, options);
  if (!printed.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, printed.ToString());
  }
  return CallJson(method, json, response);
}

}  // namespace mt::control
