#include "core/thread_pool.h"

namespace deltacast {

unsigned ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

ThreadPool::ThreadPool(unsigned threads) {
  const unsigned total = threads == 0 ? hardware_threads() : threads;
  workers_.reserve(total - 1);
  for (unsigned i = 1; i < total; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items(const std::function<void(size_t)>& fn, size_t count) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= count) return;
    fn(i);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* fn = nullptr;
    size_t count = 0;
    {
      // The job is read under the lock together with the busy count, so the caller of this
      // generation waits for this worker and the job cannot change underneath it.
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      count = count_;
      ++busy_;
    }
    if (fn != nullptr) run_items(*fn, count);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_;
    }
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> job(job_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    count_ = n;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  run_items(fn, n);
  std::unique_lock<std::mutex> lock(mutex_);
  // Workers that woke for this generation are counted in busy_ before they take an item; a worker
  // that wakes after the last item was claimed finds nothing to take, so busy_ == 0 with every item
  // claimed means every call has returned.
  done_.wait(lock, [&] { return busy_ == 0 && next_.load(std::memory_order_relaxed) >= count_; });
  fn_ = nullptr;
  count_ = 0;
}

}  // namespace deltacast
