// mt_asyncio._control: serves mt.control.v1 inside the user's process.
//
// Its own extension module because it links gRPC (and through it OpenSSL),
// which must never share a symbol scope with the core. It reaches the
// runtime only through the C function table the core exports
// (runtime/admin/admin_abi.h).

#include <Python.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <string>

#include "control/src/admin_client.h"
#include "control/src/control_service.h"
#include "control/src/peer_listener.h"
#include "grpc/health/v1/health.pb.h"
#include "runtime/admin/admin_abi.h"

namespace py = pybind11;

namespace mt::control {
namespace {

// Bounds on what a caller can make the server hold.
constexpr int kMaxReceiveMessageBytes = 64 * 1024;
constexpr int kMaxConcurrentStreamsPerConnection = 16;
constexpr int kMaxServerThreads = 48;

class NativeServer {
 public:
  NativeServer() = default;
  ~NativeServer() { Stop(0); }

  void Start(const std::string& socket_path, const MtAdminAbi* abi,
             v1::InterpreterInfo interpreter) {
    absl::StatusOr<std::unique_ptr<PeerCredListener>> listener =
        PeerCredListener::Listen(socket_path);
    if (!listener.ok()) throw std::runtime_error(std::string(listener.status().message()));
    listener_ = *std::move(listener);

    ServiceHooks hooks;
    hooks.set_serving = [this](bool serving) {
      if (server_ != nullptr) server_->GetHealthCheckService()->SetServingStatus(serving);
    };
    PeerCredListener* l = listener_.get();
    hooks.identify = [l](const grpc::ServerContext& context) { return l->Identify(context); };
    hooks.refused_connections = [l] { return l->refused(); };
    service_ = std::make_unique<ControlService>(AdminClient(abi), std::move(interpreter),
                                                std::move(hooks));

    grpc::EnableDefaultHealthCheckService(true);
    // gRPC's health service has no descriptor in the protobuf pool;
    // linking ours lets reflection describe it (grpcurl needs that).
    (void)grpc::health::v1::HealthCheckRequest::descriptor();
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               kMaxConcurrentStreamsPerConnection);
    grpc::ResourceQuota quota("mt_asyncio_control");
    quota.SetMaxThreads(kMaxServerThreads);
    builder.SetResourceQuota(quota);
    builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) throw std::runtime_error("could not start the gRPC server");
    server_->GetHealthCheckService()->SetServingStatus(true);
    listener_->Start(server_.get());
  }

  void Stop(double grace_seconds) {
    if (!server_) return;
    // gRPC's shutdown waits for its threads, and handlers of loop and task
    // methods may be waiting to attach: let them.
    py::gil_scoped_release detached;
    listener_->Stop();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<long long>(grace_seconds * 1000)));
    server_->Wait();
    server_.reset();
    service_.reset();
    listener_.reset();
  }

 private:
  std::unique_ptr<PeerCredListener> listener_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
};

v1::InterpreterInfo InterpreterFromDict(const py::dict& d) {
  v1::InterpreterInfo info;
  info.set_implementation(py::str(d["implementation"]));
  info.set_version(py::str(d["version"]));
  info.set_executable(py::str(d["executable"]));
  info.set_free_threaded(py::bool_(d["free_threaded"]));
  info.set_gil_enabled(py::bool_(d["gil_enabled"]));
  return info;
}

std::unique_ptr<NativeServer> Serve(const std::string& socket_path, py::capsule abi_capsule,
                                    const py::dict& interpreter) {
  auto* abi = static_cast<const MtAdminAbi*>(
      PyCapsule_GetPointer(abi_capsule.ptr(), kMtAdminAbiCapsuleName));
  if (abi == nullptr) throw py::error_already_set();
  if (const std::string why = AdminClient::Check(abi); !why.empty()) {
    throw std::runtime_error("mt_asyncio._control cannot use this core: " + why);
  }
  auto server = std::make_unique<NativeServer>();
  server->Start(socket_path, abi, InterpreterFromDict(interpreter));
  return server;
}

}  // namespace
}  // namespace mt::control

PYBIND11_MODULE(_control, m, py::mod_gil_not_used()) {
  using mt::control::NativeServer;
  m.doc() = "gRPC control plane for mt_asyncio (mt.control.v1).";
  py::class_<NativeServer>(m, "NativeServer")
      .def("stop", &NativeServer::Stop, py::arg("grace") = 1.0);
  m.def("serve", &mt::control::Serve, py::arg("socket_path"), py::arg("admin_abi"),
        py::arg("interpreter"));
}
