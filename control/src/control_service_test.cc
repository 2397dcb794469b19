#include "control/src/control_service.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/runtime.h"

namespace mt::control {
namespace {

// Bazel's TEST_TMPDIR is too deep for a Unix socket path (108 bytes), so
// each test gets a fresh folder under /tmp.
std::string SocketPath(const std::string& name) {
  char dir[] = "/tmp/mt-control-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  return std::string(dir) + "/" + name + ".sock";
}

class ControlServiceTest : public ::testing::Test {
 protected:
  void Serve(const runtime::admin::AdminApi* admin) {
    v1::InterpreterInfo interpreter;
    interpreter.set_implementation("cpython");
    interpreter.set_version("3.14.7");
    interpreter.set_free_threaded(true);
    service_ = std::make_unique<ControlService>(admin, interpreter);
    target_ = "unix://" + SocketPath("control");
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort(target_, grpc::InsecureServerCredentials(),
                             &bound);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(bound, 0) << "could not listen on " << target_;
  }

  grpc::Status GetInfo(v1::GetInfoResponse* response) {
    auto stub = v1::RuntimeControl::NewStub(
        grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return stub->GetInfo(&context, v1::GetInfoRequest(), response);
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    const std::string path = target_.substr(sizeof("unix://") - 1);
    unlink(path.c_str());
    rmdir(path.substr(0, path.rfind('/')).c_str());
  }

  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
};

TEST_F(ControlServiceTest, GetInfoReportsRuntimeAndInterpreter) {
  runtime::Config config;
  config.worker_threads = 2;
  config.blocking_threads_max = 9;
  runtime::Runtime rt(config);
  ASSERT_TRUE(rt.Start().ok());
  Serve(&rt);

  v1::GetInfoResponse info;
  ASSERT_TRUE(GetInfo(&info).ok());
  EXPECT_EQ(info.pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(info.interpreter().version(), "3.14.7");
  EXPECT_TRUE(info.interpreter().free_threaded());
  EXPECT_EQ(info.runtime().state(), v1::RUNTIME_STATE_RUNNING);
  EXPECT_EQ(info.runtime().config().worker_threads(), 2u);
  EXPECT_EQ(info.runtime().config().blocking_threads_max(), 9u);
  EXPECT_EQ(info.runtime().workers_size(), 2);
  rt.Shutdown();

  ASSERT_TRUE(GetInfo(&info).ok());
  EXPECT_EQ(info.runtime().state(), v1::RUNTIME_STATE_STOPPED);
  EXPECT_EQ(info.runtime().live_workers(), 0u);
}

TEST(FillRuntimeInfoTest, CopiesEveryWorker) {
  runtime::admin::RuntimeSnapshot snap;
  snap.state = runtime::admin::RuntimeState::kStopping;
  snap.worker_threads = 3;
  snap.injector_depth = 17;
  for (std::size_t i = 0; i < 3; ++i) {
    snap.workers.push_back({.index = i, .units_run = 10 * i, .parks = i,
                            .busy_ns = 1000 * i});
  }
  v1::RuntimeInfo out;
  FillRuntimeInfo(snap, &out);
  EXPECT_EQ(out.state(), v1::RUNTIME_STATE_STOPPING);
  EXPECT_EQ(out.injector_depth(), 17u);
  ASSERT_EQ(out.workers_size(), 3);
  EXPECT_EQ(out.workers(2).units_run(), 20u);
  EXPECT_EQ(out.workers(2).busy_ns(), 2000u);
}

}  // namespace
}  // namespace mt::control
