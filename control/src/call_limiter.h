// Bounds on what callers can hold once they are in: calls in flight per
// connection and for read-only callers together, and a deadline on every
// response a client does not read.
//
// gRPC's sync server gives each call a thread from a pool of 48 until the
// call's last message is on the wire. A client that never opens its
// HTTP/2 flow-control window keeps that thread, and the answer it was
// sent, for as long as it likes: 64 such GetInfo calls starved every other
// caller. So each call is tracked from its start to its end (a server
// interceptor), admitted by its handler only within the caps, and a
// watchdog cancels any call whose response has waited on the client for
// longer than the write deadline, which frees its thread and its buffer.

#ifndef MT_ASYNCIO_CONTROL_SRC_CALL_LIMITER_H_
#define MT_ASYNCIO_CONTROL_SRC_CALL_LIMITER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "control/src/token_auth.h"

namespace mt::control {

struct CallLimits {
  // Calls admitted at once on one connection (HTTP/2 allows 16 streams).
  int per_connection = 8;
  // Calls admitted at once for read-only callers, all connections
  // together: the rest of the server's 48 threads stay for admins.
  int read_only = 16;
  // How long a response (or one message of a stream) may wait for the
  // client to take it before the call is cancelled.
  std::chrono::milliseconds write_deadline{10'000};
};

class CallLimiter {
 public:
  // Told of every call once its metadata has arrived, before its handler
  // runs (the TCP listener learns here which connections authenticated).
  using CallObserver = std::function<void(const grpc::ServerContextBase& context)>;

  // `observer` is told of each call's metadata; `ended` of each call's
  // end (outside the limiter's lock).
  explicit CallLimiter(CallLimits limits = {}, CallObserver observer = nullptr,
                       std::function<void()> ended = nullptr);
  ~CallLimiter();
  CallLimiter(const CallLimiter&) = delete;
  CallLimiter& operator=(const CallLimiter&) = delete;

  // The interceptor factory to install on the server (it refers to this
  // limiter, which must outlive the server).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // Called by a handler once the caller's role is known: OK, or
  // RESOURCE_EXHAUSTED when the call would pass a cap. An admitted call
  // counts until it ends (its response sent or its call cancelled).
  grpc::Status Admit(const grpc::ServerContextBase& context, Role role);

  // A streaming handler's Write returned: the deadline stops counting
  // until its next message.
  void WriteDone(const grpc::ServerContextBase& context);
  // Puts a streaming call's messages under the write deadline (unary
  // responses always are).
  void GuardWrites(const grpc::ServerContextBase& context);

  std::uint64_t cancelled_writes() const;
  std::uint64_t refused_calls() const;

  // Interceptor hooks (public for the interceptor only).
  void Begin(grpc::ServerContextBase* context, bool unary);
  void MetadataReceived(const grpc::ServerContextBase* context) {
    if (observer_) observer_(*context);
  }
  void WriteStarted(const grpc::ServerContextBase* context);
  void End(const grpc::ServerContextBase* context);

 private:
  struct Record {
    grpc::ServerContextBase* context = nullptr;
    bool guarded = false;   // Under the write deadline.
    bool admitted = false;
    bool read_only = false;
    bool cancelled = false;
    std::string connection;  // Set when admitted.
    std::chrono::steady_clock::time_point write_started{};  // {}: no write waiting.
  };
  void Watch();

  const CallLimits limits_;
  const CallObserver observer_;
  const std::function<void()> ended_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<const grpc::ServerContextBase*, Record> calls_;  // Guarded by mu_.
  std::map<std::string, int> per_connection_;                // Guarded by mu_.
  int read_only_ = 0;                                        // Guarded by mu_.
  std::uint64_t cancelled_writes_ = 0;                       // Guarded by mu_.
  std::uint64_t refused_ = 0;                                // Guarded by mu_.
  bool stop_ = false;                                        // Guarded by mu_.
  std::thread watchdog_;
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_CALL_LIMITER_H_
