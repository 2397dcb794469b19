#ifndef MT_CONTROL_SRC_TESTING_FAKE_CORE_H_
#define MT_CONTROL_SRC_TESTING_FAKE_CORE_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/admin/admin_abi.h"

namespace mt::control::testing {

// The core's side of the admin boundary, played by a test: answers come
// from `answer`, which sees each method and its JSON request.
struct FakeCore {
  std::mutex mu;
  std::function<std::pair<int, std::string>(const std::string&, const std::string&)> answer;
  std::map<std::string, std::string> last_request;  // Guarded by mu.
};

// The function table calls whichever FakeCore is installed (one at a time).
void InstallFakeCore(FakeCore* core);
const MtAdminAbi* FakeAbi();

// A fresh folder under /tmp and a socket path in it (Bazel's TEST_TMPDIR
// is too deep for a Unix socket path's 108 bytes).
std::string SocketPath();

}  // namespace mt::control::testing

#endif  // MT_CONTROL_SRC_TESTING_FAKE_CORE_H_
