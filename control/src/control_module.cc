// mt_asyncio._control: serves mt.control.v1 inside the user's process.
//
// Its own extension module because it links gRPC (and through it OpenSSL),
// which must never share a symbol scope with the core. It reaches the
// runtime only through the AdminApi capsule that mt_asyncio._core exports.

#include <Python.h>
#include <pybind11/pybind11.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "control/src/control_service.h"
#include "runtime/admin/admin_api.h"

namespace py = pybind11;

namespace mt::control {
namespace {

class NativeServer {
 public:
  NativeServer(std::unique_ptr<ControlService> service,
               std::unique_ptr<grpc::Server> server)
      : service_(std::move(service)), server_(std::move(server)) {}
  ~NativeServer() { Stop(0); }

  void Stop(double grace_seconds) {
    if (!server_) return;
    // gRPC's shutdown waits for its threads; none of them needs the
    // interpreter, but let other Python threads run meanwhile.
    py::gil_scoped_release detached;
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(
                          static_cast<long long>(grace_seconds * 1000)));
    server_->Wait();
    server_.reset();
  }

 private:
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

std::unique_ptr<NativeServer> Serve(const std::string& target,
                                    const std::string& socket_path,
                                    py::capsule admin_capsule,
                                    const py::dict& interpreter) {
  auto* admin = static_cast<runtime::admin::AdminApi*>(PyCapsule_GetPointer(
      admin_capsule.ptr(), runtime::admin::kAdminApiCapsuleName));
  if (admin == nullptr) throw py::error_already_set();
  if (target.rfind("unix://", 0) != 0) {
    throw py::value_error("only unix:// targets are served for now");
  }
  // A socket left behind by a dead process would make bind fail.
  struct stat st;
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw py::value_error("refusing to replace non-socket file " +
                            socket_path);
    }
    unlink(socket_path.c_str());
  }

  auto service =
      std::make_unique<ControlService>(admin, InterpreterFromDict(interpreter));
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(target, grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(service.get());
  // Operators ask a handful of questions; keep the footprint small.
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
  // Created with the process umask, then tightened before anyone could use
  // it for anything but GetInfo.
  const mode_t old_umask = umask(0177);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (!server || bound == 0) {
    throw std::runtime_error("could not listen on " + target);
  }
  if (chmod(socket_path.c_str(), 0600) != 0) {
    const std::string why = std::strerror(errno);
    server->Shutdown();
    throw std::runtime_error("could not chmod " + socket_path + ": " + why);
  }
  return std::make_unique<NativeServer>(std::move(service), std::move(server));
}

}  // namespace
}  // namespace mt::control

PYBIND11_MODULE(_control, m, py::mod_gil_not_used()) {
  using mt::control::NativeServer;
  m.doc() = "gRPC control plane for mt_asyncio (mt.control.v1).";
  py::class_<NativeServer>(m, "NativeServer")
      .def("stop", &NativeServer::Stop, py::arg("grace") = 1.0);
  m.def("serve", &mt::control::Serve, py::arg("target"),
        py::arg("socket_path"), py::arg("admin_capsule"),
        py::arg("interpreter"));
}
