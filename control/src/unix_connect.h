// Connecting mtctl to a control socket it can trust.
//
// A socket's path says nothing about who serves it: in a folder another
// user can write, that user can swap the socket for their own and collect
// whatever mtctl sends (a shutdown, a resize). So mtctl connects the
// socket itself, asks the kernel who is on the other end (SO_PEERCRED),
// and hands gRPC the descriptor only when it is this user or root.

#ifndef MT_ASYNCIO_CONTROL_SRC_UNIX_CONNECT_H_
#define MT_ASYNCIO_CONTROL_SRC_UNIX_CONNECT_H_

#include <sys/types.h>

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace mt::control {

// Connects to the Unix socket at `path`, retrying until `deadline` while
// there is no socket yet or nobody accepts (a process that is starting),
// then checks the peer's uid. Returns the connected descriptor (the
// caller owns it), or: NotFound (no socket by the deadline), Unavailable
// (nobody accepted), PermissionDenied (served by another user),
// InvalidArgument (a path too long for a socket address).
absl::StatusOr<int> ConnectTrustedUnixSocket(const std::string& path,
                                             std::chrono::system_clock::time_point deadline);

// Whether a peer running as `peer_uid` may be trusted by a client running
// as `self_uid`: the same user, or root (who could read our memory anyway).
inline bool TrustedPeerUid(uid_t peer_uid, uid_t self_uid) {
  return peer_uid == self_uid || peer_uid == 0;
}

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_UNIX_CONNECT_H_
