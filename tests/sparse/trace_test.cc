#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "sparse/diff.h"
#include "sparse/trace/float_rounding.h"
#include "sparse/trace/model_layout.h"
#include "sparse/trace/rl_trace.h"

namespace deltacast {
namespace {

// Brute-force reference: the narrow value nearest to x, ties to the even pattern; overflow
// past the largest finite value (by at least half an ulp) goes to Inf, or NaN for e4m3fn.
uint32_t nearest_by_search(float x, DType dtype, unsigned width) {
  const double v = x;
  uint32_t best = 0;
  double best_err = INFINITY;
  for (uint32_t b = 0; b < (1u << width); ++b) {
    const double c = narrow_float_value(b, dtype);
    if (!std::isfinite(c) || std::signbit(c) != std::signbit(v)) continue;
    const double err = std::fabs(c - v);
    if (err < best_err || (err == best_err && (b & 1) == 0)) best = b, best_err = err;
  }
  return best;
}

TEST(FloatRounding, Bf16MatchesTheClassicFormula) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    const float x = std::bit_cast<float>(u);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(narrow_float_value(round_f32_to(x, DType::kBF16), DType::kBF16)));
      continue;
    }
    const uint32_t expected = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
    ASSERT_EQ(round_f32_to(x, DType::kBF16), expected) << std::hex << u;
  }
}

TEST(FloatRounding, F16MatchesTheCompiler) {
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    // Bias towards the f16 range so normals, denormals and overflow all occur.
    const float x =
        std::ldexp(static_cast<float>(static_cast<int32_t>(rng())) / 2147483648.0f, static_cast<int>(rng() % 50) - 30);
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(round_f32_to(x, DType::kF16), bits) << x;
  }
}

TEST(FloatRounding, Fp8MatchesNearestValueSearch) {
  std::mt19937 rng(3);
  for (DType dtype : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = std::ldexp(static_cast<float>(static_cast<int32_t>(rng())) / 2147483648.0f,
                                 static_cast<int>(rng() % 30) - 20);
      const uint32_t got = round_f32_to(x, dtype);
      const double max_finite = dtype == DType::kF8E4M3 ? 448.0 : 57344.0;
      const double half_ulp_past = dtype == DType::kF8E4M3 ? 464.0 : 61440.0;
      if (std::fabs(x) >= half_ulp_past) {
        const double v = narrow_float_value(got, dtype);
        EXPECT_TRUE(dtype == DType::kF8E4M3 ? std::isnan(v) : std::isinf(v)) << x;
        continue;
      }
      (void)max_finite;
      ASSERT_EQ(got, nearest_by_search(x, dtype, 8)) << dtype_name(dtype) << " " << x;
    }
  }
}

TEST(ModelLayout, AddsUpExactlyAndLooksLikeATransformer) {
  for (uint64_t total : {uint64_t{1000}, uint64_t{1} << 20, uint64_t{67108864}, uint64_t{268435456}}) {
    auto layout = transformer_layout(total, DType::kBF16);
    uint64_t sum = 0;
    for (const auto& t : layout) sum += t.numel();
    EXPECT_EQ(sum, total);
    if (total >= (uint64_t{1} << 20)) {
      EXPECT_GT(layout.size(), 8u);
    }
  }
}

TEST(RlTrace, Step3ChangesAboutPointEightPercentOfBf16) {
  TraceOptions options;
  options.lr = 3e-7;
  auto trace = RlTrace::create(transformer_layout(uint64_t{4} << 20, DType::kBF16), options);
  ASSERT_TRUE(trace.ok());
  const Manifest& m = (*trace)->manifest();
  std::vector<std::vector<uint8_t>> previous;
  double density = 0;
  for (int step = 1; step <= 3; ++step) {
    previous.clear();
    for (const auto& v : (*trace)->published()) previous.emplace_back(v.bytes(), v.bytes() + v.nbytes());
    (*trace)->step();
    uint64_t changed = 0;
    DiffResult diff;
    for (size_t i = 0; i < m.size(); ++i) {
      const TensorView& v = (*trace)->published()[i];
      diff_and_update(v.bytes(), previous[i].data(), v.numel, 2, &diff);
      changed += diff.count;
    }
    density = static_cast<double>(changed) / static_cast<double>(m.total_elements());
  }
  EXPECT_GT(density, 0.006);
  EXPECT_LT(density, 0.010);
}

TEST(RlTrace, InitialWeightsHaveTheRequestedSpread) {
  auto trace = RlTrace::create({{"w", DType::kBF16, {1 << 20}}}, TraceOptions{});
  double sum = 0, sq = 0;
  for (float w : (*trace)->master(0)) sum += w, sq += double(w) * w;
  const double n = 1 << 20;
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 2e-4);
}

TEST(RlTrace, DeterministicWhateverTheThreadCount) {
  std::vector<std::vector<uint8_t>> runs;
  for (unsigned threads : {1u, 3u}) {
    TraceOptions options;
    options.threads = threads;
    options.seed = 42;
    auto trace = RlTrace::create(transformer_layout(300000, DType::kBF16), options);
    (*trace)->step();
    (*trace)->step();
    std::vector<uint8_t> bytes;
    for (const auto& v : (*trace)->published()) bytes.insert(bytes.end(), v.bytes(), v.bytes() + v.nbytes());
    runs.push_back(bytes);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(RlTrace, PublishesTheRequestedDtype) {
  for (DType dtype : {DType::kF16, DType::kF8E4M3, DType::kF32}) {
    TraceOptions options;
    options.publish_dtype = dtype;
    auto trace = RlTrace::create({{"w", DType::kBF16, {4096}}}, options);
    ASSERT_TRUE(trace.ok());
    EXPECT_EQ((*trace)->manifest()[0].dtype, dtype);
    const TensorView& v = (*trace)->published()[0];
    for (uint64_t i = 0; i < 64; ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, v.bytes() + i * dtype_size(dtype), dtype_size(dtype));
      EXPECT_EQ(bits, round_f32_to((*trace)->master(0)[i], dtype));
    }
  }
  TraceOptions bad;
  bad.publish_dtype = DType::kI32;
  EXPECT_FALSE(RlTrace::create({{"w", DType::kBF16, {16}}}, bad).ok());
}

}  // namespace
}  // namespace deltacast
