// Every transition between special float values (±0, denormals, the smallest
// normal, ±Inf, quiet/signalling NaN with payloads) must survive both value
// codecs bit for bit, sparse and with zstd.
#include <gtest/gtest.h>

#include "support/codec_harness.h"

namespace deltacast {
namespace {

using testing::TensorSet;

struct FloatFormat {
  DType dtype;
  unsigned exp_bits;
  unsigned man_bits;
};

constexpr FloatFormat kFormats[] = {{DType::kF64, 11, 52}, {DType::kF32, 8, 23},   {DType::kF16, 5, 10},
                                    {DType::kBF16, 8, 7},  {DType::kF8E4M3, 4, 3}, {DType::kF8E5M2, 5, 2}};

std::vector<uint64_t> special_patterns(const FloatFormat& f) {
  const unsigned width = 1 + f.exp_bits + f.man_bits;
  const uint64_t sign = uint64_t{1} << (width - 1);
  const uint64_t exp_ones = ((uint64_t{1} << f.exp_bits) - 1) << f.man_bits;
  const uint64_t bias = (uint64_t{1} << (f.exp_bits - 1)) - 1;
  const std::vector<uint64_t> positive = {
      0,                                             // +0
      1,                                             // smallest denormal
      (uint64_t{1} << f.man_bits) - 1,               // largest denormal
      uint64_t{1} << f.man_bits,                     // smallest normal
      bias << f.man_bits,                            // 1.0
      exp_ones - 1,                                  // largest finite (largest NaN-free pattern below the top binade)
      exp_ones,                                      // Inf (a normal value in e4m3fn)
      exp_ones | (uint64_t{1} << (f.man_bits - 1)),  // quiet NaN
      exp_ones | 1,                                  // signalling NaN / NaN payload 1
      exp_ones | ((uint64_t{1} << f.man_bits) - 1),  // all-ones NaN
  };
  std::vector<uint64_t> all = positive;
  for (uint64_t p : positive) all.push_back(p | sign);
  return all;
}

TEST(EdgeValues, EveryTransitionRoundTrips) {
  for (const FloatFormat& f : kFormats) {
    const std::vector<uint64_t> specials = special_patterns(f);
    // Old/new pairs laid out with unchanged padding between them so the chunk stays sparse.
    std::vector<std::pair<uint64_t, uint64_t>> pairs;
    for (uint64_t a : specials) {
      for (uint64_t b : specials) pairs.emplace_back(a, b);
    }
    constexpr uint64_t kStride = 64;
    Manifest manifest = testing::make_manifest({{"t", f.dtype, {pairs.size() * kStride}}});
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (int zstd : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(f.dtype) << " " << value_codec_name(codec) << " zstd " << zstd);
        TensorSet base(manifest), current(manifest), consumer(manifest);
        for (size_t i = 0; i < pairs.size(); ++i) {
          testing::set_element_bits(base.tensors[0], i * kStride, pairs[i].first);
          testing::set_element_bits(current.tensors[0], i * kStride, pairs[i].second);
        }
        consumer.copy_from(base);
        CodecOptions options;
        options.value_codec = codec;
        options.zstd_level = zstd;
        auto delta = testing::encode_delta(manifest, options, base, current, 5, 6);
        ASSERT_TRUE(delta.ok());
        EXPECT_EQ(delta->stats.changed, pairs.size() - specials.size()) << "every pair but a -> a changes";
        EXPECT_GE(delta->stats.sparse_chunks, 1u) << "the sparse path must be the one exercised";
        DeltaApplier applier(manifest, 1);
        Status s = testing::verify_and_apply(applier, delta->buckets, 5, consumer);
        ASSERT_TRUE(s.ok()) << s.to_string();
        EXPECT_TRUE(consumer.same_bits(current));
      }
    }
  }
}

}  // namespace
}  // namespace deltacast
