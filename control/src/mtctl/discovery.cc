#include "control/src/mtctl/discovery.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace mt::control::mtctl {

std::string DefaultSocketDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/mt_asyncio";
  return absl::StrFormat("/tmp/mt_asyncio-%d", static_cast<int>(geteuid()));
}

std::vector<std::string> SocketsInDefaultDir() {
  std::vector<std::string> out;
  const std::string dir = DefaultSocketDir();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".sock") {
      out.push_back(dir + "/" + name);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string SocketPid(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  if (base.size() <= 5 || base.substr(base.size() - 5) != ".sock") return "";
  return base.substr(0, base.size() - 5);
}

bool OwnerAlive(const std::string& path) {
  int n = 0;
  if (!absl::SimpleAtoi(SocketPid(path), &n) || n <= 0) return true;
  return kill(n, 0) == 0 || errno == EPERM;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace mt::control::mtctl
