#include "control/src/testing/fake_core.h"

#include <stdlib.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mt::control::testing {
namespace {

std::atomic<FakeCore*> installed{nullptr};

MtAdminResponse FakeCall(const char* method, size_t method_size, const char* request,
                         size_t request_size) {
  const std::string m(method, method_size), r(request, request_size);
  std::pair<int, std::string> a(14, "no fake core installed");
  if (FakeCore* core = installed.load()) {
    std::lock_guard<std::mutex> lock(core->mu);
    core->last_request[m] = r;
    a = core->answer(m, r);
  }
  MtAdminResponse out{};
  out.code = a.first;
  out.body = static_cast<char*>(std::malloc(a.second.size() + 1));
  std::memcpy(out.body, a.second.data(), a.second.size());
  out.body_size = a.second.size();
  return out;
}

void FakeFree(MtAdminResponse* r) {
  std::free(r->body);
  r->body = nullptr;
}

const MtAdminAbi kFakeAbi = {kMtAdminAbiVersion, sizeof(MtAdminAbi), FakeCall, FakeFree};

}  // namespace

void InstallFakeCore(FakeCore* core) { installed.store(core); }

const MtAdminAbi* FakeAbi() { return &kFakeAbi; }

std::string SocketPath() {
  char dir[] = "/tmp/mt-control-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  return std::string(dir) + "/control.sock";
}

}  // namespace mt::control::testing
