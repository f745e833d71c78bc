// The portable XXH3 (the one GPU kernels run) against libxxhash on the CPU:
// every length up to a few blocks, every size class boundary, seeds, and
// whole 64 KiB leaves as the content hash uses them.
#include "core/xxh3_portable.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include <xxhash.h>

#include "core/hash.h"

namespace deltacast {
namespace {

TEST(Xxh3Portable, MatchesLibxxhashForEveryShortLength) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> data(4200);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{4200}, ~uint64_t{0}, uint64_t{0x123456789abcdef0}}) {
    for (size_t len = 0; len <= data.size(); ++len) {
      ASSERT_EQ(xxh3::hash64(data.data(), len, seed), XXH3_64bits_withSeed(data.data(), len, seed))
          << "length " << len << " seed " << seed;
    }
  }
}

TEST(Xxh3Portable, MatchesLibxxhashOnLeavesAndOffsets) {
  std::mt19937_64 rng(2);
  std::vector<uint8_t> data(3 * kHashLeafBytes + 17);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset : {size_t{0}, size_t{1}, size_t{7}}) {  // unaligned starts
    for (size_t len : {kHashLeafBytes, kHashLeafBytes - 1, 2 * kHashLeafBytes + 5}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{len}}) {
        EXPECT_EQ(xxh3::hash64(data.data() + offset, len, seed), XXH3_64bits_withSeed(data.data() + offset, len, seed));
      }
    }
  }
}

TEST(Xxh3Portable, ReproducesTheContentHash) {
  std::vector<uint8_t> data(200000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  const size_t leaves = content_hash_leaf_count(data.size());
  std::vector<uint64_t> digests(leaves);
  for (size_t i = 0; i < leaves; ++i) {
    const size_t off = i * kHashLeafBytes;
    digests[i] = xxh3::hash64(data.data() + off, std::min(kHashLeafBytes, data.size() - off), 0);
  }
  EXPECT_EQ(xxh3::hash64(digests.data(), leaves * 8, data.size()), content_hash(data.data(), data.size()));
}

}  // namespace
}  // namespace deltacast
