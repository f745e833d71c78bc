#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace deltacast {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  for (unsigned threads : {1u, 2u, 4u, 8u}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
    }
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.parallel_for(64, [&](size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GT(ids.size(), 1u);
}

TEST(ThreadPool, ManyBackToBackJobsAndConcurrentCallers) {
  ThreadPool pool(3);
  std::atomic<uint64_t> sum{0};
  auto caller = [&] {
    for (int job = 0; job < 200; ++job) pool.parallel_for(17, [&](size_t i) { sum.fetch_add(i + 1); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2u * 200u * (17u * 18u / 2u));
}

}  // namespace
}  // namespace deltacast
