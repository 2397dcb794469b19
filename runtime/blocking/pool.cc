#include "runtime/blocking/pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::runtime::blocking {

class BlockingPool::Job {
 public:
  Job(absl::AnyInvocable<void() &&> run, absl::AnyInvocable<void() &&> on_cancel)
      : run(std::move(run)), on_cancel(std::move(on_cancel)) {}
  absl::AnyInvocable<void() &&> run;
  absl::AnyInvocable<void() &&> on_cancel;
  // Where the job sits in the queue while it is queued. Guarded by the
  // pool's mu_.
  bool queued = false;
  std::list<std::shared_ptr<Job>>::iterator position;
};

bool BlockingPool::Handle::Cancel() {
  return job_ != nullptr && pool_->CancelJob(job_);
}

BlockingPool::BlockingPool(BlockingPoolOptions options)
    : options_(std::move(options)), max_threads_(options_.max_threads),
      idle_ttl_(options_.idle_ttl) {}

BlockingPool::~BlockingPool() { Shutdown(); }

absl::StatusOr<BlockingPool::Handle> BlockingPool::Spawn(
    absl::AnyInvocable<void() &&> run, absl::AnyInvocable<void() &&> on_cancel) {
  auto job = std::make_shared<Job>(std::move(run), std::move(on_cancel));
  std::vector<std::thread> to_join;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) {
      return absl::FailedPreconditionError("blocking pool is shut down");
    }
    job->position = queue_.insert(queue_.end(), job);
    job->queued = true;
    // Wake an idle thread if there is one not already claimed by an earlier
    // job; otherwise grow, up to the cap.
    if (idle_threads_ >= queue_.size()) {
      work_cv_.notify_one();
    } else if (live_threads_ < max_threads_) {
      SpawnThreadLocked();
    }
    JoinExitedLocked(to_join);
  }
  for (std::thread& t : to_join) t.join();
  return Handle(this, std::move(job));
}

bool BlockingPool::CancelJob(const std::shared_ptr<Job>& job) {
  absl::AnyInvocable<void() &&> on_cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job->queued) return false;
    queue_.erase(job->position);
    job->queued = false;
    ++cancelled_;
    on_cancel = std::move(job->on_cancel);
    job->run = nullptr;
  }
  if (on_cancel) std::move(on_cancel)();
  return true;
}

absl::Status BlockingPool::SetMaxThreads(std::size_t max_threads) {
  if (max_threads == 0) {
    return absl::InvalidArgumentError("max_threads must be at least 1");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return absl::FailedPreconditionError("blocking pool is shut down");
  max_threads_ = max_threads;
  // Growing: start threads for work that waited on the old cap.
  while (live_threads_ < max_threads_ && queue_.size() > idle_threads_) {
    SpawnThreadLocked();
  }
  // Shrinking: idle threads above the cap wake and exit; busy ones exit
  // after their current job.
  work_cv_.notify_all();
  return absl::OkStatus();
}

absl::Status BlockingPool::SetIdleTtl(std::chrono::milliseconds idle_ttl) {
  if (idle_ttl.count() <= 0) {
    return absl::InvalidArgumentError("idle_ttl must be positive");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return absl::FailedPreconditionError("blocking pool is shut down");
  idle_ttl_ = idle_ttl;
  ++ttl_changes_;
  work_cv_.notify_all();  // Idle threads recompute their deadlines.
  return absl::OkStatus();
}

void BlockingPool::SpawnThreadLocked() {
  const std::uint64_t id = next_thread_id_++;
  ++live_threads_;
  threads_.emplace(id, std::thread([this, id] { ThreadMain(id); }));
}

void BlockingPool::JoinExitedLocked(std::vector<std::thread>& out) {
  for (std::uint64_t id : exited_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    out.push_back(std::move(it->second));
    threads_.erase(it);
  }
  exited_.clear();
}

void BlockingPool::ThreadMain(std::uint64_t id) {
  pthread_setname_np(pthread_self(),
                     absl::StrCat(options_.thread_name_prefix, "-", id)
                         .substr(0, 15)
                         .c_str());
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!queue_.empty() && live_threads_ <= max_threads_) {
      std::shared_ptr<Job> job = std::move(queue_.front());
      queue_.pop_front();
      job->queued = false;
      absl::AnyInvocable<void() &&> run = std::move(job->run);
      ++running_;
      lock.unlock();
      std::move(run)();
      run = nullptr;  // Destroy captures outside the lock.
      lock.lock();
      --running_;
      ++completed_;
      exit_cv_.notify_all();
      continue;
    }
    if (shutdown_ || live_threads_ > max_threads_) break;
    ++idle_threads_;
    // Idle for a whole TTL: retire. The TTL may change while we wait
    // (SetIdleTtl): then the deadline is recomputed from the same start.
    const auto idle_since = std::chrono::steady_clock::now();
    bool woke = false;
    while (true) {
      const std::uint64_t ttl_seen = ttl_changes_;
      woke = work_cv_.wait_until(lock, idle_since + idle_ttl_, [&] {
        return shutdown_ || !queue_.empty() || live_threads_ > max_threads_ ||
               ttl_changes_ != ttl_seen;
      });
      if (ttl_changes_ == ttl_seen) break;
    }
    --idle_threads_;
    if (!woke) break;
  }
  --live_threads_;
  exited_.push_back(id);
  exit_cv_.notify_all();
  // Another thread may still be needed if work arrived while we left.
  if (!queue_.empty() && idle_threads_ == 0 && live_threads_ < max_threads_ &&
      !shutdown_) {
    SpawnThreadLocked();
  }
  // The last abandoned thread to come back releases the pool a shutdown
  // kept alive for it; `last` may destroy the pool as this returns, and
  // nothing touches it after that.
  std::shared_ptr<BlockingPool> last;
  if (shutdown_ && live_threads_ == 0) last = std::move(keep_alive_);
  lock.unlock();
}

void BlockingPool::Shutdown() { (void)Shutdown(std::chrono::steady_clock::time_point::max()); }

std::size_t BlockingPool::Shutdown(std::chrono::steady_clock::time_point abandon_after) {
  std::vector<std::shared_ptr<Job>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!shutdown_) {
      shutdown_ = true;
      for (auto& job : queue_) {
        job->queued = false;
        cancelled.push_back(std::move(job));
      }
      cancelled_ += cancelled.size();
      queue_.clear();
      work_cv_.notify_all();
    }
  }
  for (auto& job : cancelled) {
    job->run = nullptr;
    if (job->on_cancel) std::move(job->on_cancel)();
  }
  std::shared_ptr<BlockingPool> self = weak_from_this().lock();
  if (self == nullptr) abandon_after = std::chrono::steady_clock::time_point::max();
  std::vector<std::thread> to_join;
  std::size_t abandoned = 0;
  bool detached = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto all_exited = [this] { return live_threads_ == 0; };
    if (abandon_after == std::chrono::steady_clock::time_point::max()) {
      exit_cv_.wait(lock, all_exited);
    } else {
      exit_cv_.wait_until(lock, abandon_after, all_exited);
    }
    // Threads that exited are joined; the others run jobs we give up on.
    std::vector<std::uint64_t> exited(exited_.begin(), exited_.end());
    exited_.clear();
    for (auto& [id, t] : threads_) {
      if (std::find(exited.begin(), exited.end(), id) != exited.end()) {
        to_join.push_back(std::move(t));
      } else {
        t.detach();  // Running a job (or about to exit: harmless).
        detached = true;
      }
    }
    threads_.clear();
    if (detached) {
      abandoned = running_;
      abandoned_ += abandoned;
      keep_alive_ = std::move(self);  // Until the last of them returns.
    }
  }
  for (std::thread& t : to_join) {
    if (t.joinable()) t.join();
  }
  return abandoned;
}

BlockingPoolStats BlockingPool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return BlockingPoolStats{
      .threads = live_threads_,
      .idle = idle_threads_,
      .running = running_,
      .queued = queue_.size(),
      .max_threads = max_threads_,
      .idle_ttl = idle_ttl_,
      .completed = completed_,
      .cancelled = cancelled_,
      .abandoned = abandoned_,
  };
}

bool BlockingPool::IsIdle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && running_ == 0;
}

}  // namespace mt::runtime::blocking
