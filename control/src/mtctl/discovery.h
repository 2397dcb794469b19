#ifndef MT_CONTROL_SRC_MTCTL_DISCOVERY_H_
#define MT_CONTROL_SRC_MTCTL_DISCOVERY_H_

// Where mt_asyncio processes serve their control plane on this machine:
// one Unix socket per process, named after its pid, in a per-user folder.

#include <string>
#include <string_view>
#include <vector>

namespace mt::control::mtctl {

// The folder mt_asyncio.control.serve() uses by default (keep in step with
// mt_asyncio/control.py): $XDG_RUNTIME_DIR/mt_asyncio, else
// /tmp/mt_asyncio-UID.
std::string DefaultSocketDir();

// The *.sock files in DefaultSocketDir(), sorted.
std::vector<std::string> SocketsInDefaultDir();

// Whether the process a socket is named after still exists (a process
// killed without closing its control plane leaves its socket behind).
// True for a name that is not PID.sock: not ours to judge.
bool OwnerAlive(const std::string& path);

// The pid part of a socket's path ("/run/x/123.sock" -> "123").
std::string SocketPid(const std::string& path);

// A --target of digits only is a pid: its socket in the default folder.
bool AllDigits(std::string_view s);

}  // namespace mt::control::mtctl

#endif  // MT_CONTROL_SRC_MTCTL_DISCOVERY_H_
