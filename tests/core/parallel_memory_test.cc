// Parallel copies and page touching against plain memcpy and fresh memory.
#include "core/parallel_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/aligned_buffer.h"

namespace deltacast {
namespace {

TEST(ParallelMemory, CopyMatchesMemcpyAtEverySize) {
  ThreadPool pool(3);
  std::mt19937_64 rng(3);
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{(4 << 20) - 1}, size_t{4 << 20},
                      size_t{(4 << 20) + 1}, size_t{13 << 20}}) {
    std::vector<uint8_t> src(size), dst(size + 2, 0xCC), want(size + 2, 0xCC);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    if (size > 0) std::memcpy(want.data() + 1, src.data(), size);
    parallel_copy(dst.data() + 1, src.data(), size, pool);
    EXPECT_EQ(dst, want) << size;  // every byte copied, none written outside
  }
}

TEST(ParallelMemory, TouchingFreshPagesKeepsThemZero) {
  ThreadPool pool(2);
  AlignedBuffer buffer((9 << 20) + 123);
  touch_pages(buffer.data(), buffer.size(), pool);
  for (size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer.data()[i], 0) << i;
  touch_pages(buffer.data(), 0, pool);  // nothing to touch
}

}  // namespace
}  // namespace deltacast
