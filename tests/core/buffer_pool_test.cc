// Reused staging buffers: a released buffer comes back for a request it fits,
// not for one much smaller, and the pool keeps only the largest few.
#include "core/buffer_pool.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

TEST(BufferPool, AReleasedBufferIsReusedForARequestItFits) {
  BufferPool pool(2);
  const uint8_t* first = nullptr;
  {
    auto a = pool.acquire(4 << 20);
    first = a->data();
    a->data()[0] = 42;
    EXPECT_EQ(pool.idle(), 0u);
  }
  EXPECT_EQ(pool.idle(), 1u);
  auto b = pool.acquire(3 << 20);
  EXPECT_EQ(b->data(), first);
  EXPECT_GE(b->size(), 3u << 20);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(BufferPool, AMuchLargerBufferIsLeftForARequestThatNeedsIt) {
  BufferPool pool(2);
  { auto big = pool.acquire(64 << 20); }
  auto small = pool.acquire(1 << 20);
  EXPECT_LT(small->size(), 64u << 20);
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(BufferPool, KeepsOnlyTheLargestFew) {
  BufferPool pool(2);
  {
    auto a = pool.acquire(1 << 20);
    auto b = pool.acquire(8 << 20);
    auto c = pool.acquire(4 << 20);
  }
  EXPECT_EQ(pool.idle(), 2u);
  auto x = pool.acquire(8 << 20);
  auto y = pool.acquire(4 << 20);
  EXPECT_EQ(x->size(), 8u << 20);
  EXPECT_EQ(y->size(), 4u << 20);
  EXPECT_EQ(pool.idle(), 0u);
}

}  // namespace
}  // namespace deltacast
