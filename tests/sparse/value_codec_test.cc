#include "sparse/value_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "sparse/trace/float_rounding.h"

namespace deltacast {
namespace {

TEST(UlpCodec, ExhaustiveEightBitPairs) {
  for (uint64_t a = 0; a < 256; ++a) {
    for (uint64_t b = 0; b < 256; ++b) {
      if (a == b) continue;
      const uint64_t stored = ulp_encode(a, b, 8);
      ASSERT_LE(stored, ulp_max_stored(8));
      ASSERT_EQ(ulp_decode(a, stored, 8), b) << a << " -> " << b;
    }
  }
}

TEST(UlpCodec, RandomWidePairsIncludingNanAndSigns) {
  std::mt19937_64 rng(5);
  for (unsigned bits : {16u, 32u, 64u}) {
    const uint64_t mask = width_mask(bits);
    std::vector<uint64_t> specials = {0, uint64_t{1} << (bits - 1), 1, mask, mask >> 1, (mask >> 1) + 2};
    for (int i = 0; i < 20000; ++i) {
      const uint64_t a = (i < 36) ? specials[i % 6] : rng() & mask;
      const uint64_t b = (i < 36) ? specials[(i / 6) % 6] : rng() & mask;
      if (a == b) continue;
      const uint64_t stored = ulp_encode(a, b, bits);
      ASSERT_LE(stored, ulp_max_stored(bits));
      ASSERT_EQ(ulp_decode(a, stored, bits), b);
    }
  }
}

TEST(UlpCodec, KeyOrderIsNumericOrderForBf16) {
  std::vector<uint32_t> finite;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (!std::isnan(narrow_float_value(b, DType::kBF16))) finite.push_back(b);
  }
  std::sort(finite.begin(), finite.end(), [](uint32_t x, uint32_t y) { return float_key(x, 16) < float_key(y, 16); });
  for (size_t i = 1; i < finite.size(); ++i) {
    ASSERT_LE(narrow_float_value(finite[i - 1], DType::kBF16), narrow_float_value(finite[i], DType::kBF16));
  }
}

TEST(UlpCodec, SmallStepsAreSmallNumbers) {
  const uint64_t one = 0x3f80;                    // bf16 1.0
  EXPECT_EQ(ulp_encode(one, one + 1, 16), 1u);    // +1 step: zigzag 2, stored 1
  EXPECT_EQ(ulp_encode(one, one - 1, 16), 0u);    // -1 step: zigzag 1, stored 0
  EXPECT_EQ(ulp_encode(0x8000, 0x0000, 16), 1u);  // -0.0 -> +0.0 is one step up
  // +denormal -> +0 -> -0 -> -denormal: 3 steps down, zigzag 5, stored 4.
  EXPECT_EQ(ulp_encode(0x0001, 0x8001, 16), 4u);
}

TEST(ValueCodec, NamesAndEffectiveCodec) {
  EXPECT_EQ(*parse_value_codec("ulp"), ValueCodec::kUlp);
  EXPECT_EQ(*parse_value_codec("raw"), ValueCodec::kRaw);
  EXPECT_FALSE(parse_value_codec("delta").ok());
  EXPECT_EQ(effective_value_codec(ValueCodec::kUlp, DType::kBF16), ValueCodec::kUlp);
  EXPECT_EQ(effective_value_codec(ValueCodec::kUlp, DType::kI32), ValueCodec::kRaw);
  EXPECT_EQ(effective_value_codec(ValueCodec::kRaw, DType::kF32), ValueCodec::kRaw);
}

}  // namespace
}  // namespace deltacast
