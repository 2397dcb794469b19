// mt_asyncio._control: serves mt.control.v1 inside the user's process.
//
// Its own extension module because it links gRPC (and through it OpenSSL),
// which must never share a symbol scope with the core. It reaches the
// runtime only through the C function table the core exports
// (runtime/admin/admin_abi.h).

#include <Python.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
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
  int health_port() const { return server_ ? server_->health_port() : 0; }

  void Stop(double grace_seconds) {
    py::gil_scoped_release detached;
    std::lock_guard<std::mutex> lock(mu_);
    if (!server_) return;
    server_->Stop(grace_seconds);
    server_.reset();
  }

  // ControlStats as proto3 JSON, for the metrics page of this process
  // (mt_asyncio.metrics); "" when stopped or stopping (a stop in progress
  // is not waited for: it may wait for the caller).
  std::string ControlStatsJson() {
    py::gil_scoped_release detached;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || !server_) return "";
    return server_->ControlStatsJson();
  }

 private:
  std::mutex mu_;  // Stop() against ControlStatsJson().
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

// serve()'s limits (mt_asyncio.control.LIMITS: Python has checked each
// name and range) into the options.
void ApplyLimits(const py::dict& limits, ServerOptions* o) {
  const auto ms = [](double seconds) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
  };
  for (const auto& [name_obj, value_obj] : limits) {
    const std::string name = py::str(name_obj);
    const double v = py::float_(py::reinterpret_borrow<py::object>(value_obj));
    const int n = static_cast<int>(v);
    if (name == "connections") {
      o->connections.max_connections = n;
    } else if (name == "unauthenticated_per_address") {
      o->connections.max_per_peer = n;
    } else if (name == "handshake_timeout_s") {
      o->handshake_timeout_ms = static_cast<int>(ms(v).count());
    } else if (name == "first_call_deadline_s") {
      o->connections.first_call_deadline = ms(v);
    } else if (name == "write_deadline_s") {
      o->connections.write_deadline = ms(v);
      o->call_limits.write_deadline = ms(v);
    } else if (name == "idle_connection_s") {
      o->max_connection_idle_ms = static_cast<int>(ms(v).count());
    } else if (name == "calls_per_connection") {
      o->call_limits.per_connection = n;
    } else if (name == "read_only_calls") {
      o->call_limits.read_only = n;
    } else if (name == "watchers") {
      o->limits.max_watchers = n;
    } else if (name == "header_block_bytes") {
      o->frames.max_header_block_bytes = static_cast<std::size_t>(n);
    } else if (name == "control_frames_burst") {
      o->frames.control_frames_burst = v;
    } else if (name == "control_frames_per_second") {
      o->frames.control_frames_per_second = v;
    } else if (name == "admin_inspection_cpu_share") {
      o->inspection.admin_cpu_share = v;
    } else if (name == "read_only_inspection_cpu_share") {
      o->inspection.read_only_cpu_share = v;
    } else if (name == "inspection_wait_s") {
      o->inspection.max_wait = ms(v);
    } else if (name == "memory_quota_mib") {
      o->memory_quota_bytes = static_cast<std::size_t>(n) << 20;
    } else {
      throw py::value_error("unknown control-plane limit " + name);
    }
  }
}

std::unique_ptr<NativeServer> Serve(const std::string& socket_path, py::capsule abi_capsule,
                                    const py::dict& interpreter, const py::object& tcp,
                                    const py::dict& limits, const std::string& health_address) {
  auto* abi = static_cast<const MtAdminAbi*>(
      PyCapsule_GetPointer(abi_capsule.ptr(), kMtAdminAbiCapsuleName));
  if (abi == nullptr) throw py::error_already_set();
  if (const std::string why = AdminClient::Check(abi); !why.empty()) {
    throw std::runtime_error("mt_asyncio._control cannot use this core: " + why);
  }
  ServerOptions options;
  options.socket_path = socket_path;
  options.interpreter = InterpreterFromDict(interpreter);
  ApplyLimits(limits, &options);
  options.health_address = health_address;
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
      .def_property_readonly("tcp_port", &NativeServer::tcp_port)
      .def_property_readonly("health_port", &NativeServer::health_port)
      .def("control_stats_json", &NativeServer::ControlStatsJson);
  m.def("serve", &mt::control::Serve, py::arg("socket_path"), py::arg("admin_abi"),
        py::arg("interpreter"), py::arg("tcp") = py::none(), py::arg("limits") = py::dict(),
        py::arg("health_address") = "");
}
