// How much of the process inspection may take: the methods that walk
// loops and tasks in Python run one at a time, on one thread of their
// own, within a CPU share for each role.
//
// ListLoops, ListTasks, GetTask, CancelTask and the task names of
// ListWorkers run Python on the same cores as the service's workers.
// Measured on two cores against a workload that ticks every 5 ms, with
// 2,000 tasks to walk: twelve read-only clients calling ListTasks in
// loops cut the workload to 55–79% of its rate, every call within the
// call caps; bursts of 42 concurrent ListTasks from the socket's own
// user, each on a gRPC thread of its own, to 87%; and 16 pages of 2,000
// tasks built on 16 threads left 98 MiB of RSS behind (each thread's
// allocator heaps kept what its page had used). So:
//
// - one turn at a time in the whole process (a turn also holds each task
//   it reads off its workers for the read), admins before read-only
//   callers;
// - each turn runs on the budget's own thread, so every page is built
//   with the same interpreter thread state and the same allocator heaps;
//   and once the control plane has been quiet for a second after a turn
//   or a call (RequestTrim), that thread trims the heap (malloc_trim):
//   glibc keeps what gRPC's threads freed (answers held for clients that
//   did not read them, each in its thread's arena) otherwise;
// - each role has a token bucket of CPU time, refilled at its share of
//   one core and holding at most its burst: a turn starts only while its
//   role's bucket is above zero and is charged the CPU its thread used
//   (CLOCK_THREAD_CPUTIME_ID). A read-only caller that has not had its
//   turn within `max_wait` is refused; an admin waits for as long as its
//   call lasts. The buckets are separate, so read-only callers cannot use
//   up what the operator has.

#ifndef MT_ASYNCIO_CONTROL_SRC_INSPECTION_BUDGET_H_
#define MT_ASYNCIO_CONTROL_SRC_INSPECTION_BUDGET_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace mt::control {

struct InspectionLimits {
  // Admin inspection's share of one core, on average, and the CPU time it
  // may spend at once after a quiet spell.
  double admin_cpu_share = 0.25;
  std::chrono::milliseconds admin_burst{1'000};
  // The same for read-only callers, all together.
  double read_only_cpu_share = 0.05;
  std::chrono::milliseconds read_only_burst{250};
  // A read-only call that has not had its turn within this long gets
  // RESOURCE_EXHAUSTED (its thread is one of the server's few).
  std::chrono::milliseconds max_wait{5'000};
};

class InspectionBudget {
 public:
  using Clock = std::chrono::steady_clock;

  explicit InspectionBudget(InspectionLimits limits = {});
  ~InspectionBudget();
  InspectionBudget(const InspectionBudget&) = delete;
  InspectionBudget& operator=(const InspectionBudget&) = delete;

  // Waits for a turn, runs `work` on the budget's thread, and charges its
  // CPU time to the caller's role. `admin`: goes before read-only callers
  // and draws on the admin bucket. `cancelled` is polled while waiting (a
  // client that left gives up its place). Returns OK once `work` has run,
  // or CANCELLED, or RESOURCE_EXHAUSTED after limits.max_wait (read-only
  // only); `work` has not run then.
  absl::Status Run(bool admin, const std::function<bool()>& cancelled,
                   const std::function<void()>& work);

  // Something the control plane held has been, or is about to be, freed
  // (a call ended): trim the heap once the control plane has been quiet
  // for a second.
  void RequestTrim();

  // Read-only calls that waited their whole max_wait and were refused.
  std::uint64_t refused() const;
  // Total time calls spent waiting for their role's bucket (not for the
  // lane alone), in nanoseconds: how hard the budget has held them back.
  std::uint64_t throttled_ns() const;

  // The calling thread's CPU time, in nanoseconds.
  static std::int64_t ThreadCpuNs();

 private:
  struct Bucket {
    double share;
    double burst_ns;
    double tokens_ns;
  };

  // Waits for the lane and the bucket: OK, CANCELLED or RESOURCE_EXHAUSTED.
  absl::Status Acquire(bool admin, const std::function<bool()>& cancelled);
  void Release(bool admin, std::int64_t cpu_ns);
  // Adds what the shares have earned since the last refill; needs mu_.
  void Refill(Clock::time_point now);
  // The budget's thread: runs each turn's work.
  void Serve();

  const std::chrono::milliseconds max_wait_;
  mutable std::mutex mu_;
  std::condition_variable turn_over_;
  bool busy_ = false;               // Guarded by mu_.
  int admins_waiting_ = 0;          // Guarded by mu_.
  Bucket admin_;                    // Guarded by mu_; tokens may go below 0.
  Bucket read_only_;                // Guarded by mu_; tokens may go below 0.
  Clock::time_point last_refill_;   // Guarded by mu_.
  std::uint64_t refused_ = 0;       // Guarded by mu_.
  std::uint64_t throttled_ns_ = 0;  // Guarded by mu_.

  // The hand-off to the budget's thread (one turn at a time).
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  const std::function<void()>* work_ = nullptr;  // Guarded by work_mu_.
  bool work_done_ = false;                       // Guarded by work_mu_.
  std::int64_t work_cpu_ns_ = 0;                 // Guarded by work_mu_.
  bool stop_ = false;                            // Guarded by work_mu_.
  bool trim_wanted_ = false;                     // Guarded by work_mu_.
  Clock::time_point last_activity_{};            // Guarded by work_mu_.
  std::thread thread_;
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_INSPECTION_BUDGET_H_
