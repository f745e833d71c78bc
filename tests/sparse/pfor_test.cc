#include "sparse/pfor.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sparse/bitpack.h"

namespace deltacast {
namespace {

size_t brute_force_bytes(const std::vector<uint64_t>& v, unsigned width) {
  unsigned exceptions = 0, max_bits = 0;
  for (uint64_t x : v) {
    const unsigned bits = x == 0 ? 0 : 64 - static_cast<unsigned>(__builtin_clzll(x));
    max_bits = std::max(max_bits, bits);
    if (bits > width) ++exceptions;
  }
  if (exceptions == 0) return 2 + packed_bytes(v.size(), width);
  return 3 + packed_bytes(v.size(), width) + exceptions + packed_bytes(exceptions, max_bits - width);
}

std::vector<std::vector<uint64_t>> sample_blocks(std::mt19937_64& rng) {
  std::vector<std::vector<uint64_t>> blocks;
  std::geometric_distribution<uint64_t> gaps(0.008);
  for (size_t n : {size_t{1}, size_t{5}, size_t{64}, size_t{127}, size_t{128}}) {
    std::vector<uint64_t> zeros(n, 0), maxes(n, ~uint64_t{0}), geo(n), outliers(n), random(n);
    for (auto& x : geo) x = gaps(rng);
    for (auto& x : outliers) x = rng() % 4;
    outliers[rng() % n] = ~uint64_t{0} >> (rng() % 40);
    for (auto& x : random) x = rng() >> (rng() % 64);
    blocks.insert(blocks.end(), {zeros, maxes, geo, outliers, random});
  }
  return blocks;
}

TEST(Pfor, ChoosesTheSmallestLayoutAndTheSmallestWidthOnTies) {
  std::mt19937_64 rng(2);
  for (const auto& block : sample_blocks(rng)) {
    const PforLayout layout = pfor_choose_layout(block.data(), block.size());
    size_t best = SIZE_MAX;
    unsigned best_width = 0;
    for (unsigned w = 0; w <= 64; ++w) {
      const size_t bytes = brute_force_bytes(block, w);
      if (bytes < best) best = bytes, best_width = w;
    }
    EXPECT_EQ(layout.bytes, best);
    EXPECT_EQ(layout.width, best_width);
  }
}

TEST(Pfor, BlockRoundTripsAndReportsItsSize) {
  std::mt19937_64 rng(3);
  for (const auto& block : sample_blocks(rng)) {
    std::vector<uint8_t> out(pfor_max_block_bytes(block.size()));
    const size_t written = pfor_encode_block(block.data(), block.size(), out.data());
    EXPECT_EQ(written, pfor_choose_layout(block.data(), block.size()).bytes);
    std::vector<uint64_t> back(block.size());
    size_t consumed = 0;
    ASSERT_TRUE(pfor_decode_block({out.data(), written}, block.size(), back.data(), &consumed).ok());
    EXPECT_EQ(consumed, written);
    EXPECT_EQ(back, block);
  }
}

TEST(Pfor, ConsecutiveBlocksRoundTrip) {
  std::mt19937_64 rng(4);
  std::geometric_distribution<uint64_t> gaps(0.01);
  for (size_t count : {size_t{0}, size_t{1}, size_t{128}, size_t{129}, size_t{1000}, size_t{100000}}) {
    std::vector<uint64_t> values(count);
    for (auto& v : values) v = gaps(rng) + ((rng() % 100 == 0) ? (uint64_t{1} << 40) : 0);
    ByteBuffer encoded;
    pfor_encode(values.data(), count, &encoded);
    std::vector<uint64_t> back;
    uint64_t block[kPforBlockValues];
    size_t at = 0;
    while (back.size() < count) {
      const size_t n = std::min(kPforBlockValues, count - back.size());
      size_t used = 0;
      ASSERT_TRUE(pfor_decode_block(encoded.span().subspan(at), n, block, &used).ok());
      at += used;
      back.insert(back.end(), block, block + n);
    }
    EXPECT_EQ(at, encoded.size());
    EXPECT_EQ(back, values);
  }
}

TEST(Pfor, RejectsMalformedBlocks) {
  std::vector<uint64_t> values = {1, 2, 3, 1000, 5, 6, 7, 8};
  std::vector<uint8_t> out(pfor_max_block_bytes(values.size()));
  out.resize(pfor_encode_block(values.data(), values.size(), out.data()));
  ASSERT_GT(out[1], 0) << "the sample should have an exception";
  uint64_t back[kPforBlockValues];
  size_t consumed = 0;
  for (size_t cut = 0; cut < out.size(); ++cut) {
    EXPECT_FALSE(pfor_decode_block({out.data(), cut}, values.size(), back, &consumed).ok()) << "cut " << cut;
  }
  auto with = [&](size_t at, uint8_t byte) {
    std::vector<uint8_t> forged = out;
    forged[at] = byte;
    return pfor_decode_block(forged, values.size(), back, &consumed);
  };
  EXPECT_FALSE(with(0, 65).ok());                                 // width > 64
  EXPECT_FALSE(with(1, 9).ok());                                  // more exceptions than values
  EXPECT_FALSE(with(2, 0).ok());                                  // zero exception width
  EXPECT_FALSE(with(2, static_cast<uint8_t>(65 - out[0])).ok());  // width + exception width > 64
  const size_t positions_at = 3 + packed_bytes(values.size(), out[0]);
  EXPECT_FALSE(with(positions_at, 8).ok());  // exception position beyond the block
  // Trailing bytes are not part of the block: the reported size ignores them.
  std::vector<uint8_t> longer = out;
  longer.push_back(0);
  ASSERT_TRUE(pfor_decode_block(longer, values.size(), back, &consumed).ok());
  EXPECT_EQ(consumed, out.size());
}

TEST(Pfor, DuplicateExceptionPositionsAreRejected) {
  std::vector<uint64_t> values = {1, 1 << 20, 1, 1 << 20};
  std::vector<uint8_t> out(pfor_max_block_bytes(values.size()));
  out.resize(pfor_encode_block(values.data(), values.size(), out.data()));
  ASSERT_EQ(out[1], 2);
  const size_t positions_at = 3 + packed_bytes(values.size(), out[0]);
  out[positions_at + 1] = out[positions_at];
  uint64_t back[kPforBlockValues];
  size_t consumed = 0;
  EXPECT_FALSE(pfor_decode_block(out, values.size(), back, &consumed).ok());
}

}  // namespace
}  // namespace deltacast
