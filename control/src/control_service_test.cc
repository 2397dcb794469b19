#include "control/src/control_service.h"

#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "control/src/peer_listener.h"
#include "control/src/testing/fake_core.h"
#include "gtest/gtest.h"
#include "runtime/admin/snapshot_json.h"
#include "runtime/runtime.h"

namespace mt::control {
namespace {

using testing::FakeAbi;
using testing::FakeCore;
using testing::SocketPath;

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::InstallFakeCore(&core_);
    core_.answer = [this](const std::string& m, const std::string&) {
      if (m == "GetRuntime") {
        return std::make_pair(0, runtime::admin::RuntimeSnapshotToJson(rt_->Snapshot()));
      }
      return std::make_pair(12, "no such method in the fake: " + m);
    };
    runtime::Config config;
    config.worker_threads = 2;
    config.blocking_threads_max = 9;
    rt_ = std::make_unique<runtime::Runtime>(config);
    ASSERT_TRUE(rt_->Start().ok());
    // Workers publish their thread ids as they start.
    for (int i = 0; i < 1000; ++i) {
      const auto snap = rt_->Snapshot();
      if (snap.workers.size() == 2 && snap.workers[0].os_thread_id != 0 &&
          snap.workers[1].os_thread_id != 0) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void Serve(ServiceLimits limits = {}) {
    path_ = SocketPath();
    auto listener = PeerCredListener::Listen(path_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    v1::InterpreterInfo interpreter;
    interpreter.set_version("3.14.7");
    interpreter.set_free_threaded(true);
    ServiceHooks hooks;
    PeerCredListener* l = listener_.get();
    hooks.identify = [l](const grpc::ServerContext& c) { return l->Identify(c); };
    hooks.refused_connections = [l] { return l->refused(); };
    hooks.audit = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(audit_mu_);
      audit_.push_back(line);
    };
    service_ = std::make_unique<ControlService>(AdminClient(FakeAbi()), interpreter, hooks,
                                                limits);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    listener_->Start(server_.get());
    stub_ = v1::RuntimeControl::NewStub(
        grpc::CreateChannel("unix://" + path_, grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }

  void TearDown() override {
    if (listener_) listener_->Stop();
    if (server_) server_->Shutdown();
    if (!path_.empty()) rmdir(path_.substr(0, path_.rfind('/')).c_str());
    rt_->Shutdown();
    testing::InstallFakeCore(nullptr);
  }

  FakeCore core_;
  std::unique_ptr<runtime::Runtime> rt_;
  std::string path_;
  std::unique_ptr<PeerCredListener> listener_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::RuntimeControl::Stub> stub_;
  std::mutex audit_mu_;
  std::vector<std::string> audit_;
};

TEST_F(ControlServiceTest, GetInfoCarriesTheCoresDocumentWithLiveValues) {
  Serve();
  ASSERT_TRUE(rt_->SetBlockingThreadsMax(4).ok());  // Changed live.
  v1::GetInfoResponse info;
  ASSERT_TRUE(stub_->GetInfo(Context().get(), v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.pid(), static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(info.interpreter().free_threaded());
  const v1::RuntimeInfo& rt = info.runtime();
  EXPECT_EQ(rt.state(), v1::RUNTIME_STATE_RUNNING);
  EXPECT_EQ(rt.config().worker_threads(), 2u);
  EXPECT_EQ(rt.config().blocking_threads_max(), 4u);
  EXPECT_EQ(rt.blocking().max_threads(), 4u);
  ASSERT_EQ(rt.workers_size(), 2);
  EXPECT_GT(rt.workers(0).os_thread_id(), 0);
  EXPECT_NE(rt.workers(0).state(), v1::WORKER_STATE_UNSPECIFIED);
  EXPECT_EQ(info.control().refused_connections(), 0u);
}

TEST_F(ControlServiceTest, CoreErrorsBecomeTheirStatusCodes) {
  Serve();
  core_.answer = [](const std::string& m, const std::string&) {
    if (m == "ResizeWorkers") return std::make_pair(3, std::string("target must be in [1, 8]"));
    if (m == "GetTask") return std::make_pair(5, std::string("no pending task with id 7"));
    if (m == "ListLoops") return std::make_pair(0, std::string("{not json"));
    return std::make_pair(0, std::string("{}"));
  };
  v1::ResizeWorkersRequest resize;
  resize.set_target(99);
  v1::ResizeWorkersResponse resized;
  grpc::Status s = stub_->ResizeWorkers(Context().get(), resize, &resized);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "target must be in [1, 8]");
  EXPECT_EQ(core_.last_request["ResizeWorkers"], "{\"target\":99}");

  v1::GetTaskRequest get;
  get.set_id(7);
  v1::GetTaskResponse task;
  EXPECT_EQ(stub_->GetTask(Context().get(), get, &task).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_id(0);  // Refused before the core is asked.
  EXPECT_EQ(stub_->GetTask(Context().get(), get, &task).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::ListLoopsResponse loops;
  EXPECT_EQ(stub_->ListLoops(Context().get(), v1::ListLoopsRequest(), &loops).error_code(),
            grpc::StatusCode::INTERNAL);

  // Every mutating call leaves an audit line naming the caller.
  std::lock_guard<std::mutex> lock(audit_mu_);
  ASSERT_FALSE(audit_.empty());
  EXPECT_NE(audit_[0].find("uid="), std::string::npos) << audit_[0];
  EXPECT_NE(audit_[0].find("ResizeWorkers target=99"), std::string::npos) << audit_[0];
}

TEST_F(ControlServiceTest, DiagnoseBoundsItsWindowBeforeTheCoreIsAsked) {
  Serve();
  core_.answer = [](const std::string&, const std::string&) {
    return std::make_pair(0, std::string(
                                 "{\"findings\":[{\"kind\":\"FINDING_KIND_LOST_WAKEUP\","
                                 "\"summary\":\"task 3 waits\"}],\"tasks_examined\":4}"));
  };
  v1::DiagnoseRequest req;
  v1::DiagnoseResponse r;
  for (double bad : {-1.0, 5.5, std::numeric_limits<double>::quiet_NaN()}) {
    req.set_spin_window_seconds(bad);
    EXPECT_EQ(stub_->Diagnose(Context().get(), req, &r).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  EXPECT_EQ(core_.last_request.count("Diagnose"), 0u);
  req.set_spin_window_seconds(0.5);
  req.set_min_step_seconds(-1);
  EXPECT_EQ(stub_->Diagnose(Context().get(), req, &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  req.set_min_step_seconds(0.2);
  ASSERT_TRUE(stub_->Diagnose(Context().get(), req, &r).ok());
  EXPECT_EQ(core_.last_request["Diagnose"],
            "{\"spin_window_seconds\":0.5,\"min_step_seconds\":0.2}");
  ASSERT_EQ(r.findings_size(), 1);
  EXPECT_EQ(r.findings(0).kind(), v1::FINDING_KIND_LOST_WAKEUP);
  EXPECT_EQ(r.tasks_examined(), 4u);
}

TEST_F(ControlServiceTest, WatchValidatesAndBoundsItsStreams) {
  ServiceLimits limits;
  limits.max_watchers = 2;
  Serve(limits);
  v1::WatchRequest too_fast;
  too_fast.set_interval_seconds(0.01);
  {
    auto c = Context();
    auto reader = stub_->Watch(c.get(), too_fast);
    v1::WatchUpdate u;
    EXPECT_FALSE(reader->Read(&u));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::WatchRequest ok;
  ok.set_interval_seconds(0.1);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchUpdate>>> readers;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(Context());
    readers.push_back(stub_->Watch(contexts.back().get(), ok));
    v1::WatchUpdate u;
    ASSERT_TRUE(readers.back()->Read(&u));
    EXPECT_EQ(u.sequence(), 1u);
    EXPECT_EQ(u.runtime().state(), v1::RUNTIME_STATE_RUNNING);
    ASSERT_TRUE(readers.back()->Read(&u));
    EXPECT_EQ(u.sequence(), 2u);
  }
  {
    auto c = Context();
    auto third = stub_->Watch(c.get(), ok);
    v1::WatchUpdate u;
    EXPECT_FALSE(third->Read(&u));
    EXPECT_EQ(third->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : readers) (void)r->Finish();
  // The server notices the cancelled streams and frees their places.
  for (int i = 0; i < 200 && service_->watchers() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service_->watchers(), 0);
}

TEST_F(ControlServiceTest, ListenerRefusesAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  Serve();
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  // The folder is the first gate (0700): open it for this test, to reach
  // the second one, the peer-credential check.
  const std::string dir = path_.substr(0, path_.rfind('/'));
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(path_.c_str(), 0666), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(10);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(11);
    // The listener closes it without a word: EOF (or a reset).
    char buf[16];
    const ssize_t n = read(fd, buf, sizeof(buf));
    _exit(n <= 0 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) {
    // A user namespace that maps only root (Bazel's sandbox) has no other
    // uid to become; the BUILD target runs this test unsandboxed.
    GTEST_SKIP() << "cannot switch to uid " << nobody->pw_uid << " here";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int i = 0; i < 200 && listener_->refused() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(listener_->refused(), 1u);
  // Its own user still gets in.
  v1::GetInfoResponse info;
  ASSERT_TRUE(stub_->GetInfo(Context().get(), v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.control().refused_connections(), 1u);
}

TEST(PeerCredListenerTest, SocketIsPrivateWhateverTheUmask) {
  const mode_t old = umask(0);  // The widest umask a process could have.
  const std::string path = SocketPath();
  auto listener = PeerCredListener::Listen(path);
  umask(old);
  ASSERT_TRUE(listener.ok()) << listener.status();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // An existing file is not replaced.
  EXPECT_FALSE(PeerCredListener::Listen(path).ok());
  (*listener)->Stop();
  EXPECT_NE(access(path.c_str(), F_OK), 0);  // Stop removes it.
  rmdir(path.substr(0, path.rfind('/')).c_str());
}

TEST(AdminClientTest, RefusesAnotherAbiVersion) {
  const MtAdminAbi& fake_abi = *FakeAbi();
  MtAdminAbi other = fake_abi;
  other.abi_version = kMtAdminAbiVersion + 1;
  EXPECT_NE(AdminClient::Check(&other).find("version"), std::string::npos);
  MtAdminAbi small = fake_abi;
  small.struct_size = 8;
  EXPECT_NE(AdminClient::Check(&small), "");
  EXPECT_EQ(AdminClient::Check(&fake_abi), "");
  EXPECT_NE(AdminClient::Check(nullptr), "");
}

}  // namespace
}  // namespace mt::control
