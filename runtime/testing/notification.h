#ifndef MT_RUNTIME_TESTING_NOTIFICATION_H_
#define MT_RUNTIME_TESTING_NOTIFICATION_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mt::runtime::testing {

// A one-shot event for tests, on std::mutex so ThreadSanitizer sees the
// synchronisation (Debian's Abseil is not built with TSan).
class Notification {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    notified_ = true;
    cv_.notify_all();
  }
  // Every wait in a test is bounded: returns false on timeout.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return notified_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;
};

}  // namespace mt::runtime::testing

#endif  // MT_RUNTIME_TESTING_NOTIFICATION_H_
