#include "control/src/unix_connect.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace mt::control {
namespace {

using Clock = std::chrono::system_clock;

// A short folder of its own: TEST_TMPDIR is too deep for a socket path.
class UnixConnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/mtuc-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    folder_ = pattern;
    path_ = folder_ + "/s.sock";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(folder_.c_str());
  }

  // A socket bound at path_; listening when `listen_too`.
  int Bind(bool listen_too) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path_.data(), path_.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    if (listen_too) EXPECT_EQ(listen(fd, 4), 0);
    return fd;
  }

  std::string folder_;
  std::string path_;
};

TEST(TrustedPeerUid, SameUserAndRootOnly) {
  EXPECT_TRUE(TrustedPeerUid(1000, 1000));
  EXPECT_TRUE(TrustedPeerUid(0, 1000));
  EXPECT_TRUE(TrustedPeerUid(0, 0));
  EXPECT_FALSE(TrustedPeerUid(1001, 1000));
  EXPECT_FALSE(TrustedPeerUid(65534, 0));
}

TEST_F(UnixConnectTest, ConnectsToThisUsersSocket) {
  const int listener = Bind(true);
  absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path_, Clock::now());
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_GE(*fd, 0);
  close(*fd);
  close(listener);
}

TEST_F(UnixConnectTest, MissingSocketIsNotFoundAtTheDeadline) {
  const auto start = Clock::now();
  absl::StatusOr<int> fd =
      ConnectTrustedUnixSocket(path_, start + std::chrono::milliseconds(200));
  EXPECT_TRUE(absl::IsNotFound(fd.status())) << fd.status();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST_F(UnixConnectTest, WaitsForASocketThatAppears) {
  int listener = -1;
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    listener = Bind(true);
  });
  absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path_, Clock::now() + std::chrono::seconds(10));
  later.join();
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  close(listener);
}

TEST_F(UnixConnectTest, SocketNobodyListensOnIsUnavailable) {
  const int bound = Bind(false);
  absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path_, Clock::now());
  EXPECT_TRUE(absl::IsUnavailable(fd.status())) << fd.status();
  close(bound);
}

TEST_F(UnixConnectTest, PathTooLongIsInvalid) {
  absl::StatusOr<int> fd = ConnectTrustedUnixSocket("/tmp/" + std::string(200, 'x'), Clock::now());
  EXPECT_TRUE(absl::IsInvalidArgument(fd.status())) << fd.status();
}

// The swap the check exists for: a socket served by another user.
TEST_F(UnixConnectTest, SocketOfAnotherUserIsRefusedBeforeAnythingIsSent) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to serve a socket as another user";
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user nobody";
  ASSERT_EQ(chmod(folder_.c_str(), 0777), 0);  // The misconfiguration.
  int ready[2], sent[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(sent), 0);
  const pid_t child = fork();
  if (child == 0) {
    // The other user: listen, report what the client sent.
    if (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(2);
    const int listener = Bind(true);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    const int conn = accept(listener, nullptr, nullptr);
    char buf[64];
    const ssize_t n = conn < 0 ? -1 : read(conn, buf, sizeof(buf));  // 0: closed unsent.
    const char got = n > 0 ? 'y' : 'n';
    if (write(sent[1], &got, 1) != 1) _exit(4);
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  absl::StatusOr<int> fd = ConnectTrustedUnixSocket(path_, Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(absl::IsPermissionDenied(fd.status())) << fd.status();
  EXPECT_NE(std::string(fd.status().message()).find(std::to_string(nobody->pw_uid)),
            std::string::npos);
  char got = 0;
  ASSERT_EQ(read(sent[0], &got, 1), 1);
  EXPECT_EQ(got, 'n');
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace mt::control
