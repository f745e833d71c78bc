// The GPU kernels' logic (sparse/cuda/*_simt.h, pfor_warp.h) run on the host
// through simt::HostWarp / HostBlock and held to the CPU codec: same PFOR
// bytes, same chunk bytes, same shadow, same decode verdicts and writes. On a
// GPU the very same templates run with the lanes in parallel
// (tests/cuda/gpu_parity_test.cu checks that).
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "sparse/chunk_decoder.h"
#include "sparse/chunk_encoder.h"
#include "sparse/cuda/chunk_decode_simt.h"
#include "sparse/cuda/chunk_encode_simt.h"
#include "sparse/cuda/pfor_warp.h"
#include "sparse/pfor.h"
#include "support/test_tensors.h"

namespace deltacast {
namespace {

using simt::HostBlock;
using simt::HostWarp;

std::vector<uint64_t> random_block(std::mt19937_64& rng, unsigned n) {
  std::vector<uint64_t> v(n);
  const int kind = static_cast<int>(rng() % 5);
  std::geometric_distribution<uint64_t> geo(0.01);
  for (auto& x : v) {
    switch (kind) {
      case 0: x = 0; break;
      case 1: x = geo(rng); break;
      case 2: x = rng() % 3 + ((rng() % 20 == 0) ? rng() >> (rng() % 60) : 0); break;
      case 3: x = rng() >> (rng() % 64); break;
      default: x = ~uint64_t{0} - rng() % 2; break;
    }
  }
  return v;
}

TEST(SimtPfor, WarpEncodeMatchesCpuBytesAndDecodes) {
  std::mt19937_64 rng(1);
  simt::PforWarpScratch scratch;
  for (int trial = 0; trial < 3000; ++trial) {
    const unsigned n = 1 + static_cast<unsigned>(rng() % 128);
    const auto values = random_block(rng, n);
    std::vector<uint8_t> cpu(pfor_max_block_bytes(n)), warp(pfor_max_block_bytes(n), 0xEE);
    cpu.resize(pfor_encode_block(values.data(), n, cpu.data()));
    const size_t written = simt::warp_pfor_encode(HostWarp{}, values.data(), n, warp.data(), scratch);
    ASSERT_EQ(written, cpu.size()) << "trial " << trial;
    ASSERT_TRUE(std::equal(cpu.begin(), cpu.end(), warp.begin())) << "trial " << trial;
    std::vector<uint64_t> back(n);
    ASSERT_EQ(simt::warp_pfor_decode(HostWarp{}, cpu.data(), cpu.size(), n, back.data(), scratch), cpu.size());
    ASSERT_EQ(back, values);
  }
}

TEST(SimtPfor, WarpDecodeRejectsWhatTheCpuRejects) {
  std::mt19937_64 rng(2);
  simt::PforWarpScratch scratch;
  int rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const unsigned n = 1 + static_cast<unsigned>(rng() % 128);
    const auto values = random_block(rng, n);
    std::vector<uint8_t> bytes(pfor_max_block_bytes(n));
    bytes.resize(pfor_encode_block(values.data(), n, bytes.data()));
    // Mutate a few bytes, or cut the block short.
    if (rng() % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    }
    std::vector<uint64_t> cpu(n), warp(n);
    size_t cpu_used = 0;
    const bool cpu_ok = pfor_decode_block(bytes, n, cpu.data(), &cpu_used).ok();
    const size_t warp_used = simt::warp_pfor_decode(HostWarp{}, bytes.data(), bytes.size(), n, warp.data(), scratch);
    ASSERT_EQ(cpu_ok, warp_used != 0) << "trial " << trial;
    if (cpu_ok) {
      ASSERT_EQ(cpu_used, warp_used);
      ASSERT_EQ(cpu, warp);
    } else {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 5000);
}

// Encodes one chunk both ways: CPU (diff + encode_delta_chunk) and the block template.
struct ChunkCase {
  DType dtype;
  ValueCodec codec;
  uint64_t count;
  double density;
};

template <typename U>
void check_chunk(const ChunkCase& c, std::mt19937_64& rng) {
  const unsigned size = sizeof(U);
  testing::GuardedTensor base(c.dtype, c.count), current(c.dtype, c.count);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  const uint64_t changes = c.density < 0 ? 1 : static_cast<uint64_t>(c.density * static_cast<double>(c.count));
  testing::apply_random_changes(current, changes, rng);

  std::vector<uint8_t> cpu_shadow(base.bytes().begin(), base.bytes().end());
  ChunkScratch scratch;
  diff_and_update(current.data(), cpu_shadow.data(), c.count, size, &scratch.diff);
  ByteBuffer cpu;
  const ValueCodec effective = effective_value_codec(c.codec, c.dtype);
  const ChunkRange range{3, c.dtype, 1000, c.count};
  encode_delta_chunk(range, current.data(), scratch.diff, c.codec, 0, &scratch, &cpu);

  std::vector<uint8_t> gpu_shadow(base.bytes().begin(), base.bytes().end());
  std::vector<uint8_t> out(ChunkHeader::kBytes + c.count * size + 8, 0xEE);
  uint64_t out_size = 0, changed = 0;
  const simt::EncodeJob job{current.data(), gpu_shadow.data(), out.data(), &out_size, &changed,
                            1000, static_cast<uint32_t>(c.count), 3, static_cast<uint8_t>(effective)};
  auto shared = std::make_unique<simt::EncodeShared<U>>();
  simt::encode_chunk<U>(HostBlock{simt::kEncodeThreads}, *shared, job);

  SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << " " << value_codec_name(c.codec) << " count " << c.count
                                    << " density " << c.density);
  EXPECT_EQ(changed, scratch.diff.count);
  EXPECT_EQ(gpu_shadow, cpu_shadow) << "the shadow must become the current version";
  ASSERT_EQ(out_size, cpu.size());
  EXPECT_TRUE(std::equal(cpu.data(), cpu.data() + cpu.size(), out.begin())) << "chunk bytes differ";
}

TEST(SimtEncoder, BlockEncoderMatchesCpuChunkBytes) {
  std::mt19937_64 rng(3);
  for (DType dtype : kAllDTypes) {
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (uint64_t count : {uint64_t{1}, uint64_t{127}, uint64_t{5000}, uint64_t{40000}}) {
        for (double density : {0.0, -1.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
          const ChunkCase c{dtype, codec, count, density};
          switch (dtype_size(dtype)) {
            case 1: check_chunk<uint8_t>(c, rng); break;
            case 2: check_chunk<uint16_t>(c, rng); break;
            case 4: check_chunk<uint32_t>(c, rng); break;
            default: check_chunk<uint64_t>(c, rng); break;
          }
        }
      }
    }
  }
}

// A sparse chunk encoded by the CPU, then decoded by the warp template: same verdict, same result.
TEST(SimtDecoder, WarpDecoderMatchesCpuOnValidAndForgedBodies) {
  std::mt19937_64 rng(4);
  auto scratch = std::make_unique<simt::DecodeWarpScratch>();
  int compared = 0, rejected = 0;
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kI8, DType::kF64, DType::kI16}) {
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      const uint64_t count = 30000;
      testing::GuardedTensor base(dtype, count), current(dtype, count);
      testing::fill_random_bits(base, rng);
      current.copy_from(base);
      testing::apply_random_changes(current, count / 50, rng);
      std::vector<uint8_t> shadow(base.bytes().begin(), base.bytes().end());
      ChunkScratch enc;
      diff_and_update(current.data(), shadow.data(), count, dtype_size(dtype), &enc.diff);
      ByteBuffer chunk;
      ASSERT_EQ(encode_delta_chunk({0, dtype, 0, count}, current.data(), enc.diff, codec, 0, &enc, &chunk),
                EncodedAs::kSparse);
      const ChunkHeader header = *ChunkHeader::parse(chunk.span());
      const std::vector<uint8_t> body(chunk.data() + ChunkHeader::kBytes,
                                      chunk.data() + ChunkHeader::kBytes + header.raw_body_bytes);
      for (int trial = 0; trial < 300; ++trial) {
        std::vector<uint8_t> forged = body;
        if (trial > 0) {  // trial 0 is the valid body
          for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e) forged[rng() % forged.size()] = static_cast<uint8_t>(rng());
        }
        ChunkHeader h = header;
        h.raw_body_bytes = h.body_bytes = forged.size();
        const bool cpu_ok = verify_chunk_body(h, forged, dtype).ok();
        testing::GuardedTensor cpu_target(dtype, count), warp_target(dtype, count);
        cpu_target.copy_from(base);
        warp_target.copy_from(base);
        const simt::DecodeJob job{forged.data(), forged.size(), warp_target.data(), count, h.nnz,
                                  static_cast<uint8_t>(dtype_size(dtype)), 0, h.value_codec};
        const uint32_t verdict = simt::warp_decode_job<false>(HostWarp{}, job, *scratch);
        ASSERT_EQ(cpu_ok, verdict == simt::kDecodeOk) << "trial " << trial << ": " << simt::decode_error_name(verdict);
        ++compared;
        if (!cpu_ok) {
          ++rejected;
          continue;
        }
        ASSERT_TRUE(apply_chunk_body(h, forged, cpu_target.view()).ok());
        ASSERT_EQ(simt::warp_decode_job<true>(HostWarp{}, job, *scratch), simt::kDecodeOk);
        ASSERT_TRUE(warp_target.same_bits(cpu_target)) << "trial " << trial;
        ASSERT_TRUE(warp_target.guards_intact());
        if (trial == 0) {
          ASSERT_TRUE(warp_target.same_bits(current));
        }
      }
    }
  }
  EXPECT_GT(rejected, compared / 4);  // edits inside raw values still decode: only structure breaks
}

}  // namespace
}  // namespace deltacast
