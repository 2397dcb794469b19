// The TLS listener: tokens on every call, roles per call, mutual TLS, and
// what the server refuses to start with.

#include "control/src/control_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control/src/testing/fake_core.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace mt::control {
namespace {

using testing::FakeAbi;
using testing::FakeCore;

constexpr char kAdminToken[] = "admin-token-0123456789abcdef";
constexpr char kReadOnlyToken[] = "read-only-token-0123456789abcdef";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// A CA, a server certificate for 127.0.0.1/localhost and a client
// certificate (CN "ops"), made with the openssl command into `dir`.
bool MakeCertificates(const std::string& dir) {
  const std::string script =
      "set -e; cd '" + dir +
      "'; "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key "
      "-out ca.pem -days 2 -subj '/CN=test CA'; "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key "
      "-out server.csr -subj '/CN=localhost'; "
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext; "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out server.pem -days 2 -extfile san.ext; "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout client.key "
      "-out client.csr -subj '/CN=ops'; "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out client.pem -days 2";
  return std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
}

class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl command is not installed (it makes the test certificates)";
    }
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/certs";
    mkdir(dir_.c_str(), 0700);
    ASSERT_TRUE(MakeCertificates(dir_));
    core_.answer = [](const std::string& m, const std::string&) {
      if (m == "GetRuntime") return std::make_pair(0, std::string("{\"state\":\"running\"}"));
      return std::make_pair(0, std::string("{}"));
    };
    testing::InstallFakeCore(&core_);
  }

  void TearDown() override {
    if (server_) server_->Stop(0);
    server_.reset();
    if (!socket_path_.empty()) rmdir(socket_path_.substr(0, socket_path_.rfind('/')).c_str());
    testing::InstallFakeCore(nullptr);
  }

  TcpOptions Tcp(bool mutual = false) {
    TcpOptions tcp;
    tcp.address = "127.0.0.1:0";
    tcp.cert_chain_pem = ReadFile(dir_ + "/server.pem");
    tcp.private_key_pem = ReadFile(dir_ + "/server.key");
    if (mutual) tcp.client_ca_pem = ReadFile(dir_ + "/ca.pem");
    tcp.tokens.admin = kAdminToken;
    tcp.tokens.read_only = kReadOnlyToken;
    return tcp;
  }

  absl::Status Start(TcpOptions tcp, int handshake_timeout_ms = kHandshakeTimeoutMs) {
    ServerOptions options;
    options.handshake_timeout_ms = handshake_timeout_ms;
    options.tcp = std::move(tcp);
    return Start(std::move(options));
  }

  absl::Status Start(ServerOptions options) {
    socket_path_ = testing::SocketPath();
    options.socket_path = socket_path_;
    auto server = ControlServer::Start(FakeAbi(), std::move(options));
    if (!server.ok()) return server.status();
    server_ = *std::move(server);
    return absl::OkStatus();
  }

  std::shared_ptr<grpc::Channel> TlsChannel(bool client_certificate = false) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(dir_ + "/ca.pem");
    if (client_certificate) {
      ssl.pem_cert_chain = ReadFile(dir_ + "/client.pem");
      ssl.pem_private_key = ReadFile(dir_ + "/client.key");
    }
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->tcp_port()),
                               grpc::SslCredentials(ssl));
  }

  static std::unique_ptr<grpc::ClientContext> Context(const std::string& authorization) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) c->AddMetadata("authorization", authorization);
    return c;
  }

  static grpc::StatusCode GetInfo(v1::RuntimeControl::Stub& stub, const std::string& auth,
                                  v1::GetInfoResponse* out = nullptr) {
    v1::GetInfoResponse info;
    const grpc::Status s = stub.GetInfo(Context(auth).get(), v1::GetInfoRequest(), &info);
    if (out != nullptr) *out = info;
    return s.error_code();
  }

  static grpc::StatusCode Drain(v1::RuntimeControl::Stub& stub, const std::string& auth) {
    v1::DrainResponse r;
    return stub.Drain(Context(auth).get(), v1::DrainRequest(), &r).error_code();
  }

  // A plain TCP connection to the listener from `source` (any address
  // of 127/8), or -1.
  int Connect(const char* source = "127.0.0.1") const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(server_->tcp_port()));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  // Whether the server ends the connection (EOF or a reset) within `ms`.
  static bool EndsWithin(int fd, int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      if (read(fd, buf, sizeof(buf)) <= 0) return true;
    }
    return false;
  }

  // GetInfo over the Unix socket (an admin, always let in).
  v1::ControlStats UnixStats() const {
    auto stub = v1::RuntimeControl::NewStub(
        grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials()));
    v1::GetInfoResponse info;
    EXPECT_EQ(GetInfo(*stub, "", &info), grpc::StatusCode::OK);
    return info.control();
  }

  FakeCore core_;
  std::string dir_;
  std::string socket_path_;
  std::unique_ptr<ControlServer> server_;
};

TEST(TokenAuthTest, ComparesWholeTokensAndGrantsTheirRoles) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret-and-more", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  BearerTokens tokens{"admin-token", "read-token"};
  EXPECT_EQ(tokens.RoleOf("Bearer admin-token"), Role::kAdmin);
  EXPECT_EQ(tokens.RoleOf("bearer  read-token "), Role::kReadOnly);
  EXPECT_EQ(tokens.RoleOf("Bearer admin-toke"), Role::kNone);
  EXPECT_EQ(tokens.RoleOf("Basic admin-token"), Role::kNone);
  EXPECT_EQ(tokens.RoleOf("admin-token"), Role::kNone);
  EXPECT_EQ(tokens.RoleOf("Bearer "), Role::kNone);
  BearerTokens admin_only{"admin-token", ""};
  EXPECT_EQ(admin_only.RoleOf("Bearer "), Role::kNone);  // The empty token is no token.
}

TEST_F(TlsServerTest, EveryCallNeedsATokenAndRolesHoldPerCall) {
  ASSERT_TRUE(Start(Tcp()).ok());
  ASSERT_GT(server_->tcp_port(), 0);
  auto stub = v1::RuntimeControl::NewStub(TlsChannel());
  const std::string admin = std::string("Bearer ") + kAdminToken;
  const std::string read_only = std::string("Bearer ") + kReadOnlyToken;

  EXPECT_EQ(GetInfo(*stub, ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetInfo(*stub, "Bearer wrong-token-0123456789abcdef"),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetInfo(*stub, std::string("Basic ") + kAdminToken),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetInfo(*stub, read_only), grpc::StatusCode::OK);
  EXPECT_EQ(Drain(*stub, read_only), grpc::StatusCode::PERMISSION_DENIED);
  // One connection, alternating tokens: an admin call lends nothing to the
  // read-only calls after it.
  EXPECT_EQ(Drain(*stub, admin), grpc::StatusCode::OK);
  EXPECT_EQ(Drain(*stub, read_only), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Drain(*stub, ""), grpc::StatusCode::UNAUTHENTICATED);

  v1::GetInfoResponse info;
  ASSERT_EQ(GetInfo(*stub, admin, &info), grpc::StatusCode::OK);
  EXPECT_TRUE(info.control().draining());
  EXPECT_EQ(info.control().rejected_calls(), 6u);

  // Health and reflection sit behind the same gate.
  auto health = grpc::health::v1::Health::NewStub(TlsChannel());
  grpc::health::v1::HealthCheckResponse checked;
  EXPECT_EQ(health->Check(Context("").get(), {}, &checked).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(health->Check(Context(read_only).get(), {}, &checked).ok());
  EXPECT_EQ(checked.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  // The Unix socket needs no token: its peers' uid is checked instead.
  auto local = v1::RuntimeControl::NewStub(
      grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(Drain(*local, ""), grpc::StatusCode::OK);
}

TEST_F(TlsServerTest, PlaintextIsNotServedOverTcp) {
  ASSERT_TRUE(Start(Tcp()).ok());
  auto plain = v1::RuntimeControl::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->tcp_port()),
                          grpc::InsecureChannelCredentials()));
  EXPECT_EQ(GetInfo(*plain, std::string("Bearer ") + kAdminToken),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsServerTest, APeerThatNeverHandshakesIsDisconnected) {
  ASSERT_TRUE(Start(Tcp(), /*handshake_timeout_ms=*/300).ok());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server_->tcp_port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // Silent: the server gives up on the handshake and closes (EOF or a
  // reset), well before the test's own 10 s limit.
  pollfd p{fd, POLLIN, 0};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(poll(&p, 1, 10'000), 1);
  char buf[64];
  EXPECT_LE(read(fd, buf, sizeof(buf)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  close(fd);
}

TEST_F(TlsServerTest, MutualTlsNeedsACertificateFromTheClientCa) {
  ASSERT_TRUE(Start(Tcp(/*mutual=*/true)).ok());
  const std::string admin = std::string("Bearer ") + kAdminToken;
  auto without = v1::RuntimeControl::NewStub(TlsChannel(false));
  EXPECT_EQ(GetInfo(*without, admin), grpc::StatusCode::UNAVAILABLE);
  auto with = v1::RuntimeControl::NewStub(TlsChannel(true));
  EXPECT_EQ(GetInfo(*with, admin), grpc::StatusCode::OK);
  EXPECT_EQ(GetInfo(*with, ""), grpc::StatusCode::UNAUTHENTICATED);  // Still a token.
}

// Every method of the service refuses a call without a valid token, and
// every refusal, health's included, is counted under the address that
// made it, with the client certificate's subject.
TEST_F(TlsServerTest, EveryRefusalIsCountedUnderItsPeer) {
  ASSERT_TRUE(Start(Tcp(/*mutual=*/true)).ok());
  auto channel = TlsChannel(true);
  grpc::GenericStub generic(channel);
  const google::protobuf::ServiceDescriptor* service =
      v1::GetInfoRequest::descriptor()->file()->FindServiceByName("RuntimeControl");
  ASSERT_NE(service, nullptr);
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string path = "/" + service->full_name() + "/" + service->method(i)->name();
    grpc::ByteBuffer empty, reply;
    grpc::Slice nothing("", 0);
    empty = grpc::ByteBuffer(&nothing, 1);
    auto context = Context(i % 2 == 0 ? "" : "Bearer wrong-token-0123456789abcdef");
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    generic.UnaryCall(context.get(), path, grpc::StubOptions(), &empty, &reply,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = s;
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; })) << path;
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << path;
    EXPECT_EQ(status.error_message(), i % 2 == 0
                                          ? "no bearer token (metadata 'authorization: Bearer <token>')"
                                          : "wrong bearer token")
        << path;
  }
  auto stub = v1::RuntimeControl::NewStub(channel);
  EXPECT_EQ(Drain(*stub, std::string("Bearer ") + kReadOnlyToken),
            grpc::StatusCode::PERMISSION_DENIED);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckResponse checked;
  EXPECT_EQ(health->Check(Context("").get(), {}, &checked).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  v1::GetInfoResponse info;
  ASSERT_EQ(GetInfo(*stub, std::string("Bearer ") + kAdminToken, &info), grpc::StatusCode::OK);
  EXPECT_EQ(info.control().rejected_calls(), static_cast<uint64_t>(service->method_count()) + 2);
  ASSERT_EQ(info.control().refusals_size(), 1);
  const v1::PeerRefusals& by_address = info.control().refusals(0);
  EXPECT_EQ(by_address.peer(), "ipv4:127.0.0.1");
  EXPECT_EQ(by_address.client_subject(), "CN=ops");
  EXPECT_EQ(by_address.unauthenticated_calls(),
            static_cast<uint64_t>(service->method_count()) + 1);
  EXPECT_EQ(by_address.permission_denied_calls(), 1u);
  EXPECT_EQ(by_address.last_reason(), "no bearer token (metadata 'authorization: Bearer <token>')");
  EXPECT_LT(by_address.last_seconds_ago(), 30);
}

// A raw HTTP/2 client on the Unix socket that opens `streams` GetInfo
// calls with a stream window of 0 and never reads: the answers can never
// be sent. Returns the connected descriptor.
int OpenZeroWindowCalls(const std::string& socket_path, int streams) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) return -1;
  auto frame = [](std::string* out, uint8_t type, uint8_t flags, uint32_t stream,
                  const std::string& payload) {
    const uint32_t n = static_cast<uint32_t>(payload.size());
    out->push_back(static_cast<char>(n >> 16));
    out->push_back(static_cast<char>(n >> 8));
    out->push_back(static_cast<char>(n));
    out->push_back(static_cast<char>(type));
    out->push_back(static_cast<char>(flags));
    for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(stream >> shift));
    *out += payload;
  };
  // HPACK: each header a literal without indexing, names and values plain.
  auto literal = [](const std::string& name, const std::string& value) {
    return std::string(1, '\0') + static_cast<char>(name.size()) + name +
           static_cast<char>(value.size()) + value;
  };
  std::string wire = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0.
  frame(&wire, 0x4, 0, 0, std::string("\x00\x04\x00\x00\x00\x00", 6));
  const std::string headers = literal(":method", "POST") + literal(":scheme", "http") +
                              literal(":path", "/mt.control.v1.RuntimeControl/GetInfo") +
                              literal(":authority", "x") +
                              literal("content-type", "application/grpc") +
                              literal("te", "trailers");
  for (int i = 0; i < streams; ++i) {
    const uint32_t stream = 1 + 2 * i;
    frame(&wire, 0x1, 0x4, stream, headers);                      // HEADERS, END_HEADERS.
    frame(&wire, 0x0, 0x1, stream, std::string("\0\0\0\0\0", 5));  // DATA, END_STREAM.
  }
  if (write(fd, wire.data(), wire.size()) != static_cast<ssize_t>(wire.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// Answers a client never takes are cancelled after the write deadline,
// from the watchdog thread while the calls' own threads wait on them (run
// under TSan in CI), and the caps refuse what is over them at once.
TEST(CallLimitsTest, UnreadAnswersAreCancelledAndTheCapsHold) {
  testing::FakeCore core;
  core.answer = [](const std::string& m, const std::string&) {
    if (m == "GetRuntime") return std::make_pair(0, std::string("{\"state\":\"running\"}"));
    return std::make_pair(0, std::string("{}"));
  };
  testing::InstallFakeCore(&core);
  const std::string path = testing::SocketPath();
  ServerOptions options;
  options.socket_path = path;
  options.call_limits.per_connection = 4;
  // Long enough that every connection's ten calls are read before the
  // first is cancelled: a cancelled call frees its place, and a call read
  // after that would be let in instead of refused (seen under TSan at 300 ms).
  options.call_limits.write_deadline = std::chrono::milliseconds(2000);
  auto server = ControlServer::Start(FakeAbi(), std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  auto admin = v1::RuntimeControl::NewStub(grpc::CreateChannel(
      "unix://" + path, grpc::InsecureChannelCredentials()));
  std::vector<int> attackers;
  for (int i = 0; i < 3; ++i) {
    attackers.push_back(OpenZeroWindowCalls(path, 10));
    ASSERT_GE(attackers.back(), 0);
  }
  v1::GetInfoResponse info;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ASSERT_TRUE(admin->GetInfo(&context, v1::GetInfoRequest(), &info).ok());
    // Both counts settle in their own time: refusals as the server reads
    // each connection's frames (late under TSan), cancellations after the
    // write deadline.
    if (info.control().cancelled_writes() >= 12 && info.control().calls_over_limit() >= 18) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < give_up);
  EXPECT_EQ(info.control().calls_over_limit(), 3u * (10 - 4));
  EXPECT_EQ(info.control().cancelled_writes(), 3u * 4);
  for (int fd : attackers) close(fd);
  (*server)->Stop(0);
  testing::InstallFakeCore(nullptr);
}

// The health-only port: plaintext grpc.health.v1, NOT_SERVING overall
// after Drain while "liveness" stays SERVING, and nothing else there:
// the control service and reflection answer UNIMPLEMENTED.
TEST(HealthPortTest, ServesHealthAloneAndFollowsDrain) {
  testing::FakeCore core;
  core.answer = [](const std::string&, const std::string&) {
    return std::make_pair(0, std::string("{}"));
  };
  testing::InstallFakeCore(&core);
  const std::string path = testing::SocketPath();
  ServerOptions options;
  options.socket_path = path;
  options.health_address = "127.0.0.1:0";
  auto server = ControlServer::Start(FakeAbi(), std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->health_port(), 0);
  auto plain = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->health_port()),
                                   grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(plain);
  auto status_of = [&](const std::string& service) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = health->Check(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.status();
  };
  using Response = grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(status_of(""), Response::SERVING);
  EXPECT_EQ(status_of("liveness"), Response::SERVING);

  auto control = v1::RuntimeControl::NewStub(plain);
  grpc::ClientContext info_context;
  v1::GetInfoResponse info;
  EXPECT_EQ(control->GetInfo(&info_context, v1::GetInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext drain_context;
  v1::DrainResponse drained;
  EXPECT_EQ(control->Drain(&drain_context, v1::DrainRequest(), &drained).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(status_of(""), Response::SERVING);  // That Drain did nothing.

  auto admin = v1::RuntimeControl::NewStub(
      grpc::CreateChannel("unix://" + path, grpc::InsecureChannelCredentials()));
  grpc::ClientContext admin_context;
  ASSERT_TRUE(admin->Drain(&admin_context, v1::DrainRequest(), &drained).ok());
  EXPECT_EQ(status_of(""), Response::NOT_SERVING);
  EXPECT_EQ(status_of("liveness"), Response::SERVING);
  (*server)->Stop(0);
  testing::InstallFakeCore(nullptr);
}

// A health port that cannot be had fails the start: one a plain socket
// holds, or another control server's (never shared through SO_REUSEPORT).
TEST(HealthPortTest, AnAddressInUseFailsTheStart) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ServerOptions options;
  options.socket_path = testing::SocketPath();
  options.health_address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto server = ControlServer::Start(FakeAbi(), std::move(options));
  EXPECT_FALSE(server.ok());
  close(fd);

  ServerOptions first_options;
  first_options.socket_path = testing::SocketPath();
  first_options.health_address = "127.0.0.1:0";
  auto first = ControlServer::Start(FakeAbi(), std::move(first_options));
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions second_options;
  second_options.socket_path = testing::SocketPath();
  second_options.health_address = "127.0.0.1:" + std::to_string((*first)->health_port());
  EXPECT_FALSE(ControlServer::Start(FakeAbi(), std::move(second_options)).ok());
  (*first)->Stop(0);
}

// A connection that makes no call is closed once idle for the limit,
// on the Unix socket (handed to gRPC by the listener) and over TLS.
TEST_F(TlsServerTest, IdleConnectionsAreClosed) {
  socket_path_ = testing::SocketPath();
  ServerOptions options;
  options.socket_path = socket_path_;
  options.tcp = Tcp();
  options.max_connection_idle_ms = 500;
  auto server = ControlServer::Start(FakeAbi(), std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);

  // The Unix socket: the HTTP/2 preface and nothing more, then wait for EOF.
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                              std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  ASSERT_EQ(write(fd, preface.data(), preface.size()), static_cast<ssize_t>(preface.size()));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
      closed = true;
      break;
    }
  }
  close(fd);
  EXPECT_TRUE(closed) << "an idle connection on the Unix socket was kept";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));

  // TLS: a channel that made one call goes back to IDLE once the server
  // closes the connection under it.
  auto channel = TlsChannel();
  auto stub = v1::RuntimeControl::NewStub(channel);
  EXPECT_EQ(GetInfo(*stub, std::string("Bearer ") + kAdminToken), grpc::StatusCode::OK);
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  const auto until = std::chrono::system_clock::now() + std::chrono::seconds(10);
  while (channel->GetState(false) == GRPC_CHANNEL_READY &&
         channel->WaitForStateChange(GRPC_CHANNEL_READY, until)) {
  }
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY);
}

TEST_F(TlsServerTest, OpenConnectionsAreCappedInAllAndPerAddress) {
  ServerOptions options;
  options.tcp = Tcp();
  options.connections.max_connections = 4;
  options.connections.max_per_peer = 3;
  ASSERT_TRUE(Start(std::move(options)).ok());
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) held.push_back(Connect("127.0.0.1"));
  for (int fd : held) ASSERT_GE(fd, 0);
  // The listener takes them in order: wait until all three are counted.
  for (int i = 0; i < 200 && UnixStats().open_tcp_connections() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(UnixStats().open_tcp_connections(), 3u);
  const int fourth_same = Connect("127.0.0.1");
  ASSERT_GE(fourth_same, 0);
  EXPECT_TRUE(EndsWithin(fourth_same, 2000)) << "a 4th connection from one address was kept";
  const int other = Connect("127.0.0.2");
  ASSERT_GE(other, 0);
  EXPECT_FALSE(EndsWithin(other, 300)) << "another address was refused under the caps";
  // A 5th in all: the oldest connection that has not authenticated makes
  // room for it.
  const int fifth = Connect("127.0.0.3");
  ASSERT_GE(fifth, 0);
  EXPECT_TRUE(EndsWithin(held.front(), 2000)) << "the oldest unauthenticated one was kept";
  EXPECT_FALSE(EndsWithin(fifth, 300)) << "a newcomer found no room";
  close(held.front());
  held.erase(held.begin());
  const v1::ControlStats stats = UnixStats();
  EXPECT_EQ(stats.open_tcp_connections(), 4u);
  EXPECT_EQ(stats.refused_connections(), 2u);
  bool named = false;
  for (const v1::PeerRefusals& p : stats.refusals()) {
    // The 4th refused, then the 1st closed to make room.
    if (p.peer() == "ipv4:127.0.0.1" && p.refused_connections() == 2 &&
        p.last_reason().find("the oldest connection without a valid token") !=
            std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << "the refusals are not counted under 127.0.0.1 with their reason";
  // A place frees up when a connection ends, and a real client gets it.
  close(held.back());
  held.pop_back();
  for (int i = 0; i < 100 && UnixStats().open_tcp_connections() > 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(UnixStats().open_tcp_connections(), 3u);
  auto stub = v1::RuntimeControl::NewStub(TlsChannel());
  EXPECT_EQ(GetInfo(*stub, std::string("Bearer ") + kAdminToken), grpc::StatusCode::OK);
  for (int fd : held) close(fd);
  close(fourth_same);
  close(other);
  close(fifth);
}

TEST_F(TlsServerTest, ConnectionsWithoutAnAuthenticatedCallAreClosed) {
  ServerOptions options;
  options.tcp = Tcp();
  options.connections.first_call_deadline = std::chrono::milliseconds(400);
  ASSERT_TRUE(Start(std::move(options)).ok());
  // A silent peer (gRPC's own handshake timeout is 10 s here).
  const int silent = Connect();
  ASSERT_GE(silent, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(EndsWithin(silent, 5000));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  close(silent);
  // TLS and calls with a wrong token: closed at the deadline all the same.
  auto wrong_channel = TlsChannel();
  auto wrong = v1::RuntimeControl::NewStub(wrong_channel);
  EXPECT_EQ(GetInfo(*wrong, "Bearer not-the-token-at-all-0123"),
            grpc::StatusCode::UNAUTHENTICATED);
  // One call with the token, then quiet past the deadline: kept.
  auto good_channel = TlsChannel();
  auto good = v1::RuntimeControl::NewStub(good_channel);
  const std::string admin = std::string("Bearer ") + kAdminToken;
  EXPECT_EQ(GetInfo(*good, admin), grpc::StatusCode::OK);
  const auto until = std::chrono::system_clock::now() + std::chrono::seconds(5);
  while (wrong_channel->GetState(false) == GRPC_CHANNEL_READY &&
         wrong_channel->WaitForStateChange(GRPC_CHANNEL_READY, until)) {
  }
  EXPECT_NE(wrong_channel->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_EQ(good_channel->GetState(false), GRPC_CHANNEL_READY);
  v1::GetInfoResponse info;
  EXPECT_EQ(GetInfo(*good, admin, &info), grpc::StatusCode::OK);
  EXPECT_EQ(info.control().open_tcp_connections(), 1u);
  EXPECT_EQ(info.control().refused_connections(), 2u);
}

TEST_F(TlsServerTest, TheListenerAcceptsAgainOnceDescriptorsAreBack) {
  ASSERT_TRUE(Start(Tcp()).ok());
  auto stub = v1::RuntimeControl::NewStub(TlsChannel());
  const std::string admin = std::string("Bearer ") + kAdminToken;
  // Sockets made first: connecting needs no new descriptor.
  std::vector<int> waiting;
  for (int i = 0; i < 4; ++i) waiting.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit tight = saved;
  tight.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::vector<int> hogs;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(server_->tcp_port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int shed = 0;
  for (int fd : waiting) {
    // Every free descriptor is taken before each connection, including
    // those other threads (gRPC's own, TSan's) let go of since the last:
    // the listener would accept into one of them and serve.
    for (int hog; (hog = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) hogs.push_back(hog);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    if (EndsWithin(fd, 2000)) ++shed;
  }
  for (int fd : hogs) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (int fd : waiting) close(fd);
  // Every connection that came while none was free was shed at once, not
  // left hanging in the backlog.
  EXPECT_EQ(shed, 4);
  // And the listener is still there: a real client gets in at once.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(GetInfo(*stub, admin), grpc::StatusCode::OK);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(TlsServerTest, RefusesTcpWithoutTlsOrTokens) {
  TcpOptions no_tls = Tcp();
  no_tls.private_key_pem.clear();
  EXPECT_EQ(Start(no_tls).code(), absl::StatusCode::kInvalidArgument);
  TcpOptions no_token = Tcp();
  no_token.tokens.admin.clear();
  EXPECT_EQ(Start(no_token).code(), absl::StatusCode::kInvalidArgument);
  TcpOptions same = Tcp();
  same.tokens.read_only = same.tokens.admin;
  EXPECT_EQ(Start(same).code(), absl::StatusCode::kInvalidArgument);
  // A key gRPC cannot load: no server, and no socket file left behind.
  TcpOptions bad_key = Tcp();
  bad_key.private_key_pem = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  EXPECT_FALSE(Start(bad_key).ok());
  EXPECT_NE(access(socket_path_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace mt::control
