#ifndef MT_CONTROL_SRC_MTCTL_CLIENT_H_
#define MT_CONTROL_SRC_MTCTL_CLIENT_H_

// mtctl's connection to one process: the target resolved (a path, a pid, the
// only live process of this user, or HOST:PORT over TLS with a token), the
// channel, the stub, each call's context and how a failed call is said.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "control/src/mtctl/args.h"
#include "mt/control/v1/control.grpc.pb.h"

namespace mt::control::mtctl {

class Client {
 public:
  explicit Client(const Options& opts) : opts_(opts) {}

  // Resolves the target and connects; an exit code on failure, said on
  // stderr when `report`.
  int Connect(bool report = true);

  // A call's context: the --timeout deadline unless `deadline` is false,
  // and the bearer token for a TCP target.
  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) const;

  v1::RuntimeControl::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& target() const { return target_; }
  // Whether Connect() refused a socket served by another user.
  bool foreign() const { return foreign_; }

  // Prints a failed call and returns its exit code.
  int Failed(const grpc::Status& status) const;

 private:
  const Options& opts_;
  std::string target_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RuntimeControl::Stub> stub_;
  bool foreign_ = false;
};

}  // namespace mt::control::mtctl

#endif  // MT_CONTROL_SRC_MTCTL_CLIENT_H_
