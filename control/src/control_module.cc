// mt_asyncio._control: serves mt.control.v1 inside the user's process.
//
// Its own extension module because it links gRPC (and through it OpenSSL),
// which must never share a symbol scope with the core. It reaches the
// runtime only through the C function table the core exports
// (runtime/admin/admin_abi.h).

#include <Python.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "control/src/admin_client.h"
#include "control/src/control_server.h"
#include "runtime/admin/admin_abi.h"

namespace py = pybind11;

namespace mt::control {
namespace {

// The server as Python holds it: stop() releases the interpreter while
// gRPC's threads wind down, since handlers of loop and task methods may
// be waiting to attach to it.
class NativeServer {
 public:
  explicit NativeServer(std::unique_ptr<ControlServer> server) : server_(std::move(server)) {}
  ~NativeServer() { Stop(0); }

  int tcp_port() const { return server_ ? server_->tcp_port() : 0; }

  void Stop(double grace_seconds) {
    if (!server_) return;
    py::gil_scoped_release detached;
    server_->Stop(grace_seconds);
    server_.reset();
  }

 private:
  std::unique_ptr<ControlServer> server_;
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
                                    const py::dict& interpreter, const py::object& tcp) {
  auto* abi = static_cast<const MtAdminAbi*>(
      PyCapsule_GetPointer(abi_capsule.ptr(), kMtAdminAbiCapsuleName));
  if (abi == nullptr) throw py::error_already_set();
  if (const std::string why = AdminClient::Check(abi); !why.empty()) {
    throw std::runtime_error("mt_asyncio._control cannot use this core: " + why);
  }
  ServerOptions options;
  options.socket_path = socket_path;
  options.interpreter = InterpreterFromDict(interpreter);
  if (!tcp.is_none()) {
    const py::dict d = tcp.cast<py::dict>();
    TcpOptions t;
    t.address = py::str(d["address"]);
    t.cert_chain_pem = py::str(d["cert_chain_pem"]);
    t.private_key_pem = py::str(d["private_key_pem"]);
    t.client_ca_pem = py::str(d["client_ca_pem"]);
    t.tokens.admin = py::str(d["admin_token"]);
    t.tokens.read_only = py::str(d["read_only_token"]);
    options.tcp = std::move(t);
  }
  absl::StatusOr<std::unique_ptr<ControlServer>> server =
      ControlServer::Start(abi, std::move(options));
  if (!server.ok()) {
    if (server.status().code() == absl::StatusCode::kInvalidArgument) {
      throw py::value_error(std::string(server.status().message()));
    }
    throw std::runtime_error(std::string(server.status().message()));
  }
  return std::make_unique<NativeServer>(*std::move(server));
}

}  // namespace
}  // namespace mt::control

PYBIND11_MODULE(_control, m, py::mod_gil_not_used()) {
  using mt::control::NativeServer;
  m.doc() = "gRPC control plane for mt_asyncio (mt.control.v1).";
  py::class_<NativeServer>(m, "NativeServer")
      .def("stop", &NativeServer::Stop, py::arg("grace") = 1.0)
      .def_property_readonly("tcp_port", &NativeServer::tcp_port);
  m.def("serve", &mt::control::Serve, py::arg("socket_path"), py::arg("admin_abi"),
        py::arg("interpreter"), py::arg("tcp") = py::none());
}
