#ifndef MT_RUNTIME_BLOCKING_POOL_H_
#define MT_RUNTIME_BLOCKING_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "runtime/blocking/stats.h"

namespace mt::runtime::blocking {

struct BlockingPoolOptions {
  std::size_t max_threads = 128;
  // An idle thread retires after waiting this long for work.
  std::chrono::milliseconds idle_ttl{30'000};
  std::string thread_name_prefix = "mt-blocking";
};

// Threads for work that blocks (file I/O, getaddrinfo, run_in_executor).
// Spawned on demand up to max_threads, retired after idle_ttl, FIFO queue.
// Work not yet started can be cancelled; lowering max_threads never
// interrupts running work (surplus threads exit as they finish).
class BlockingPool : public std::enable_shared_from_this<BlockingPool> {
 public:
  class Job;
  // Refers to one submitted job; Cancel works until a thread picks it up.
  class Handle {
   public:
    Handle() = default;
    // True if the job had not started: it will never run and its on_cancel
    // has run (on the calling thread).
    bool Cancel();
    bool valid() const { return job_ != nullptr; }

   private:
    friend class BlockingPool;
    Handle(BlockingPool* pool, std::shared_ptr<Job> job)
        : pool_(pool), job_(std::move(job)) {}
    BlockingPool* pool_ = nullptr;
    std::shared_ptr<Job> job_;
  };

  explicit BlockingPool(BlockingPoolOptions options);
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Queues `run`. `on_cancel` runs instead if the job is cancelled before
  // it starts (including by Shutdown). FailedPrecondition after Shutdown.
  absl::StatusOr<Handle> Spawn(absl::AnyInvocable<void() &&> run,
                               absl::AnyInvocable<void() &&> on_cancel = nullptr);

  // Live change of the thread cap. 0 is refused.
  absl::Status SetMaxThreads(std::size_t max_threads);
  // Live change of how long an idle thread waits before it retires
  // (threads already idle count from when they became idle). Positive.
  absl::Status SetIdleTtl(std::chrono::milliseconds idle_ttl);

  // Cancels queued jobs, waits for running ones, joins every thread.
  // Idempotent; not from a pool thread.
  void Shutdown();
  // The same, but jobs still running at `abandon_after` are abandoned:
  // their threads are detached (and the pool kept alive until the last
  // of them exits), so a
  // job that never returns cannot hold a shutdown forever. Abandoning
  // needs the pool to be owned by a shared_ptr; otherwise this waits like
  // Shutdown(). Returns how many jobs were abandoned.
  std::size_t Shutdown(std::chrono::steady_clock::time_point abandon_after);

  BlockingPoolStats Stats() const;
  // True when nothing is queued or running.
  bool IsIdle() const;

 private:
  void SpawnThreadLocked();
  void ThreadMain(std::uint64_t id);
  void JoinExitedLocked(std::vector<std::thread>& out);
  bool CancelJob(const std::shared_ptr<Job>& job);

  const BlockingPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable exit_cv_;
  std::list<std::shared_ptr<Job>> queue_;       // Guarded by mu_.
  std::map<std::uint64_t, std::thread> threads_;  // Guarded by mu_.
  std::vector<std::uint64_t> exited_;           // Guarded by mu_.
  std::uint64_t next_thread_id_ = 0;            // Guarded by mu_.
  std::size_t max_threads_;                     // Guarded by mu_.
  std::chrono::milliseconds idle_ttl_;          // Guarded by mu_.
  std::uint64_t ttl_changes_ = 0;               // Guarded by mu_.
  std::size_t live_threads_ = 0;                // Guarded by mu_.
  std::size_t idle_threads_ = 0;                // Guarded by mu_.
  std::size_t running_ = 0;                     // Guarded by mu_.
  std::uint64_t completed_ = 0;                 // Guarded by mu_.
  std::uint64_t cancelled_ = 0;                 // Guarded by mu_.
  std::size_t abandoned_ = 0;                   // Guarded by mu_.
  // Set once jobs were abandoned: their threads still use the pool; the
  // last one to exit drops it.
  std::shared_ptr<BlockingPool> keep_alive_;    // Guarded by mu_.
  bool shutdown_ = false;                       // Guarded by mu_.
};

}  // namespace mt::runtime::blocking

#endif  // MT_RUNTIME_BLOCKING_POOL_H_
