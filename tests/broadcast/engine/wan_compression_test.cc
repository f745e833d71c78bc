// The choice to compress a version harder for a slow WAN: zstd's ratio and speed sampled from
// the version's own chunks, weighed against the slowest WAN link's rate.
#include "broadcast/engine/wan_compression.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "core/byte_buffer.h"
#include "sparse/chunk_encoder.h"

namespace deltacast {
namespace {

// Dense chunks of `bytes` each (the codec's own format), from `fill`.
std::vector<ByteBuffer> chunks_of(size_t count, size_t bytes, const std::function<uint8_t(size_t)>& fill) {
  std::vector<ByteBuffer> chunks(count);
  std::vector<uint8_t> data(bytes);
  for (size_t c = 0; c < count; ++c) {
    for (size_t i = 0; i < bytes; ++i) data[i] = fill(c * bytes + i);
    ChunkRange range{0, DType::kU8, c * bytes, bytes};
    encode_dense_chunk(range, data.data(), 0, &chunks[c]);
  }
  return chunks;
}

std::vector<std::span<const uint8_t>> spans(const std::vector<ByteBuffer>& chunks) {
  std::vector<std::span<const uint8_t>> out;
  for (const auto& c : chunks) out.push_back(c.span());
  return out;
}

TEST(WanCompression, TheSampleMeasuresRatioAndSpeedOfTheVersionsOwnChunks) {
  const auto repetitive = chunks_of(64, 65536, [](size_t i) { return static_cast<uint8_t>((i / 7) % 3); });
  const ZstdSample packed = sample_zstd(spans(repetitive), 1, 1 << 20);
  EXPECT_TRUE(packed.measured());
  EXPECT_LT(packed.ratio, 0.2);
  EXPECT_GT(packed.compress_rate, 0);
  EXPECT_GT(packed.decompress_rate, 0);
  EXPECT_GE(packed.bytes, size_t{1} << 20);
  EXPECT_LE(packed.bytes, (size_t{1} << 20) + 2 * 65600);
  // Spread over the chunks, not the first ones alone: the first half repetitive, the second
  // random, the sample sees both.
  std::mt19937 rng(3);
  const auto halves = chunks_of(64, 65536, [&](size_t i) {
    return i < 32 * 65536 ? static_cast<uint8_t>((i / 7) % 3) : static_cast<uint8_t>(rng());
  });
  const ZstdSample spread = sample_zstd(spans(halves), 1, 1 << 20);
  EXPECT_GT(spread.ratio, 0.4);
  EXPECT_LT(spread.ratio, 0.7);
  const auto random = chunks_of(16, 65536, [&](size_t) { return static_cast<uint8_t>(rng()); });
  const ZstdSample noise = sample_zstd(spans(random), 1, 1 << 20);
  EXPECT_DOUBLE_EQ(noise.ratio, 1.0) << "incompressible chunks stay as they are";
  EXPECT_EQ(noise.bytes, 16u * random[0].size());
  EXPECT_FALSE(sample_zstd({}, 1).measured());
  EXPECT_FALSE(sample_zstd(spans(repetitive), 0).measured()) << "level 0 is no zstd stage";
}

TEST(WanCompression, ZstdIsChosenWhereTheWanIsSlowerThanItCosts) {
  ZstdSample sample;
  sample.ratio = 0.65;
  sample.compress_rate = 400e6;
  sample.decompress_rate = 1.2e9;
  sample.bytes = 1 << 20;
  EXPECT_TRUE(zstd_pays_off(sample, 12.5e6, 2)) << "100 Mbit/s";
  EXPECT_TRUE(zstd_pays_off(sample, 125e6, 8)) << "1 Gbit/s, 8 threads";
  EXPECT_FALSE(zstd_pays_off(sample, 12.5e9, 64)) << "100 Gbit/s: the CPU is slower than the link";
  // At 1 Gbit/s: saved 0.35 / 125e6 = 2.8 ns a byte, spent 1 / 800e6 + 1 / 1.2e9 = 2.1 ns a
  // byte on 2 threads: under 1.5x, no; on 8 threads 1.1 ns, yes.
  EXPECT_FALSE(zstd_pays_off(sample, 125e6, 2));
  EXPECT_FALSE(zstd_pays_off(sample, 0, 2)) << "no WAN link measured";
  ZstdSample incompressible = sample;
  incompressible.ratio = 1;
  EXPECT_FALSE(zstd_pays_off(incompressible, 1e6, 2));
  EXPECT_FALSE(zstd_pays_off(ZstdSample{}, 1e6, 2)) << "nothing sampled";
}

}  // namespace
}  // namespace deltacast
