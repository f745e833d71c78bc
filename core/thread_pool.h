// A fixed set of worker threads running parallel loops. Encode and decode
// split work by chunk; chunks vary in cost (dense vs sparse), so indices are
// handed out one at a time from a shared counter rather than in fixed blocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace deltacast {

class ThreadPool {
 public:
  // `threads` counts the calling thread too: 1 runs everything inline,
  // 0 means one per hardware thread.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n) and returns when all calls are done.
  // Calls from several threads at once are serialised.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

  static unsigned hardware_threads();

 private:
  void worker_loop();
  void run_items(const std::function<void(size_t)>& fn, size_t count);

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  size_t busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// Runs fn(i) -> Status over the pool and returns the error of the lowest
// failing index, so the reported error does not depend on thread timing.
template <typename Fn>
Status parallel_for_status(ThreadPool& pool, size_t n, Fn&& fn) {
  std::vector<Status> statuses(n);
  pool.parallel_for(n, [&](size_t i) { statuses[i] = fn(i); });
  for (auto& s : statuses) {
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace deltacast
