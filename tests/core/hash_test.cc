#include "core/hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace deltacast {
namespace {

// The definition written out longhand: leaves of 64 KiB, XXH3 of each, XXH3 of the digests seeded with the length.
uint64_t reference_content_hash(const std::vector<uint8_t>& data) {
  std::vector<uint64_t> digests;
  size_t offset = 0;
  do {
    const size_t len = std::min<size_t>(65536, data.size() - offset);
    digests.push_back(XXH3_64bits(data.data() + offset, len));
    offset += len;
  } while (offset < data.size());
  return XXH3_64bits_withSeed(digests.data(), digests.size() * 8, data.size());
}

TEST(ContentHash, MatchesDefinitionAcrossLeafBoundaries) {
  std::mt19937_64 rng(7);
  for (size_t size : {size_t{0}, size_t{1}, size_t{65535}, size_t{65536}, size_t{65537}, size_t{300000},
                      size_t{64 * 65536 + 3}, size_t{65 * 65536}}) {
    std::vector<uint8_t> data(size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    EXPECT_EQ(content_hash(data.data(), data.size()), reference_content_hash(data)) << size;
    EXPECT_EQ(content_hash_leaf_count(size), std::max<size_t>(1, (size + 65535) / 65536));
  }
}

TEST(ContentHash, EveryByteMatters) {
  std::vector<uint8_t> data(200000, 0x11);
  const uint64_t base = content_hash(data.data(), data.size());
  for (size_t i : {size_t{0}, size_t{65535}, size_t{65536}, size_t{199999}}) {
    data[i] ^= 1;
    EXPECT_NE(content_hash(data.data(), data.size()), base) << i;
    data[i] ^= 1;
  }
  // Length is part of the hash: trailing zero bytes change it.
  std::vector<uint8_t> longer = data;
  longer.push_back(0);
  EXPECT_NE(content_hash(longer.data(), longer.size()), base);
}

TEST(ContentHash, FromLeavesEqualsDirect) {
  std::vector<uint8_t> data(150000, 3);
  const size_t leaves = content_hash_leaf_count(data.size());
  std::vector<uint64_t> digests(leaves);
  for (size_t i = 0; i < leaves; ++i) {
    const size_t off = i * kHashLeafBytes;
    digests[i] = xxh3_64(data.data() + off, std::min(kHashLeafBytes, data.size() - off));
  }
  EXPECT_EQ(content_hash_from_leaves(digests.data(), leaves, data.size()), content_hash(data.data(), data.size()));
}

TEST(Xxh3Stream, PiecesGiveTheOneShotValue) {
  std::mt19937_64 rng(11);
  for (size_t size : {size_t{0}, size_t{1}, size_t{240}, size_t{1025}, size_t{300000}, size_t{3 << 20}}) {
    std::vector<uint8_t> data(size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    for (uint64_t seed : {uint64_t{0}, uint64_t{77}}) {
      Xxh3Stream stream;
      stream.reset(seed);
      for (size_t at = 0; at < size;) {
        const size_t n = std::min<size_t>(size - at, 1 + rng() % 70000);
        stream.update(data.data() + at, n);
        at += n;
      }
      EXPECT_EQ(stream.digest(), xxh3_64(data.data(), data.size(), seed)) << size << " seed " << seed;
      EXPECT_EQ(stream.digest(), XXH3_64bits_withSeed(data.data(), data.size(), seed));
    }
  }
}


TEST(ContentHashStream, PiecesOfAnySizeGiveTheContentHash) {
  std::mt19937_64 rng(12);
  ContentHashStream stream;  // reused across inputs, as a receiver reuses its own
  for (size_t size : {size_t{0}, size_t{1}, size_t{kHashLeafBytes - 1}, size_t{kHashLeafBytes}, size_t{kHashLeafBytes + 1},
                      size_t{300000}, size_t{(3 << 20) + 17}}) {
    std::vector<uint8_t> data(size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    for (int split = 0; split < 4; ++split) {
      stream.reset();
      for (size_t at = 0; at < size;) {
        // Whole leaves, pieces straddling leaf ends, and single bytes.
        const size_t limit = split == 0 ? 256 * 1024 : split == 1 ? 70000 : split == 2 ? 3 : kHashLeafBytes;
        const size_t n = std::min<size_t>(size - at, 1 + rng() % limit);
        stream.update(data.data() + at, n);
        at += n;
      }
      EXPECT_EQ(stream.digest(), content_hash(data.data(), data.size())) << size << " split " << split;
    }
  }
  // A flipped bit anywhere changes the value.
  std::vector<uint8_t> data(200000, 9);
  stream.reset();
  stream.update(data.data(), data.size());
  const uint64_t clean = stream.digest();
  data[131072] ^= 1;
  stream.reset();
  stream.update(data.data(), data.size());
  EXPECT_NE(stream.digest(), clean);
}

TEST(ContentHashLeaves, GiveTheContentHashOfEveryLeafAlignedRange) {
  std::mt19937_64 rng(13);
  ThreadPool pool(3);
  for (size_t size : {size_t{0}, size_t{100}, size_t{5 * kHashLeafBytes}, size_t{(200 * kHashLeafBytes) + 999}}) {
    std::vector<uint8_t> data(size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const std::vector<uint64_t> leaves = content_hash_leaves(data.data(), size, pool);
    ASSERT_EQ(leaves.size(), content_hash_leaf_count(size));
    EXPECT_EQ(content_hash_from_leaves(leaves.data(), leaves.size(), size), content_hash(data.data(), size));
    // A range starting on a leaf: its own content hash, from its leaves alone.
    for (size_t first = 0; first < leaves.size(); first += 7) {
      const size_t offset = first * kHashLeafBytes;
      const size_t length = std::min<size_t>(size - offset, 4 * kHashLeafBytes);
      const size_t count = content_hash_leaf_count(length);
      EXPECT_EQ(content_hash_from_leaves(leaves.data() + first, count, length), content_hash(data.data() + offset, length))
          << size << " at leaf " << first;
    }
  }
}

}  // namespace
}  // namespace deltacast
