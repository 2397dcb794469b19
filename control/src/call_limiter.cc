#include "control/src/call_limiter.h"

#include <utility>

#include "control/src/thread_priority.h"

namespace mt::control {
namespace {

using grpc::experimental::InterceptionHookPoints;

class LimitInterceptor final : public grpc::experimental::Interceptor {
 public:
  LimitInterceptor(CallLimiter* limiter, grpc::experimental::ServerRpcInfo* info)
      : limiter_(limiter), context_(info->server_context()) {
    LowerThisThread();  // gRPC's thread, about to work on a call.
    limiter_->Begin(context_, info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY);
  }
  // The call is over: its last message sent or the call cancelled.
  ~LimitInterceptor() override { limiter_->End(context_); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // Never takes the limiter's lock on PRE_SEND_CANCEL: the watchdog
    // cancels while holding it.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      limiter_->MetadataReceived(context_);
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      limiter_->WriteStarted(context_);
    }
    methods->Proceed();
  }

 private:
  CallLimiter* const limiter_;
  grpc::ServerContextBase* const context_;
};

class LimitInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LimitInterceptorFactory(CallLimiter* limiter) : limiter_(limiter) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new LimitInterceptor(limiter_, info);
  }

 private:
  CallLimiter* const limiter_;
};

}  // namespace

CallLimiter::CallLimiter(CallLimits limits, CallObserver observer, std::function<void()> ended)
    : limits_(limits), observer_(std::move(observer)), ended_(std::move(ended)) {
  watchdog_ = std::thread([this] { Watch(); });
}

CallLimiter::~CallLimiter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CallLimiter::InterceptorFactory() {
  return std::make_unique<LimitInterceptorFactory>(this);
}

void CallLimiter::Begin(grpc::ServerContextBase* context, bool unary) {
  std::lock_guard<std::mutex> lock(mu_);
  Record& r = calls_[context];
  r.context = context;
  r.guarded = unary;
}

void CallLimiter::WriteStarted(const grpc::ServerContextBase* context) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(context);
  if (it != calls_.end()) it->second.write_started = std::chrono::steady_clock::now();
}

void CallLimiter::WriteDone(const grpc::ServerContextBase& context) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(&context);
  if (it != calls_.end()) it->second.write_started = {};
}

void CallLimiter::GuardWrites(const grpc::ServerContextBase& context) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(&context);
  if (it != calls_.end()) it->second.guarded = true;
}

void CallLimiter::End(const grpc::ServerContextBase* context) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(context);
    if (it == calls_.end()) return;
    const Record& r = it->second;
    if (r.admitted) {
      if (--per_connection_[r.connection] <= 0) per_connection_.erase(r.connection);
      if (r.read_only) --read_only_;
    }
    calls_.erase(it);
  }
  if (ended_) ended_();
}

grpc::Status CallLimiter::Admit(const grpc::ServerContextBase& context, Role role) {
  // The peer string names the connection: "ipv4:10.0.0.2:51234" over TCP,
  // "fd:12" for a Unix-socket connection the listener handed over.
  const std::string connection = context.peer();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(&context);
  if (it == calls_.end() || it->second.admitted) return grpc::Status::OK;
  const bool read_only = role != Role::kAdmin;
  auto conn = per_connection_.find(connection);
  if (conn != per_connection_.end() && conn->second >= limits_.per_connection) {
    ++refused_;
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many calls in flight on this connection (" +
                            std::to_string(limits_.per_connection) + ")");
  }
  if (read_only && read_only_ >= limits_.read_only) {
    ++refused_;
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many read-only calls in flight (" +
                            std::to_string(limits_.read_only) +
                            "); the rest of the server is kept for admins");
  }
  Record& r = it->second;
  r.admitted = true;
  r.read_only = read_only;
  r.connection = connection;
  ++per_connection_[connection];
  if (read_only) ++read_only_;
  return grpc::Status::OK;
}

void CallLimiter::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    const auto now = std::chrono::steady_clock::now();
    for (auto& [key, r] : calls_) {
      if (!r.guarded || r.cancelled || r.write_started == std::chrono::steady_clock::time_point{}) {
        continue;
      }
      if (now - r.write_started < limits_.write_deadline) continue;
      // Under the lock: End() for this call waits, so the context is
      // still alive; TryCancel is safe from any thread.
      r.cancelled = true;
      ++cancelled_writes_;
      r.context->TryCancel();
    }
  }
}

std::uint64_t CallLimiter::cancelled_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_writes_;
}

std::uint64_t CallLimiter::refused_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

}  // namespace mt::control
