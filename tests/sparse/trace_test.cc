#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sparse/diff.h"
#include "sparse/trace/float_rounding.h"
#include "sparse/trace/model_layout.h"
#include "sparse/trace/rl_trace.h"

namespace deltacast {
namespace {

// Search reference: non-negative finite patterns 0..max_finite of a narrow format are in value order, so
// a binary search finds the two neighbours of |x|; the nearer wins, ties go to the even pattern.
uint32_t nearest_by_search(float x, DType dtype, uint32_t max_finite, unsigned sign_shift) {
  const double v = std::fabs(static_cast<double>(x));
  uint32_t lo = 0, hi = max_finite;
  if (v >= narrow_float_value(max_finite, dtype)) {
    lo = max_finite;
  } else {
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      (narrow_float_value(mid, dtype) <= v ? lo : hi) = mid;
    }
    const double below = v - narrow_float_value(lo, dtype), above = narrow_float_value(hi, dtype) - v;
    if (above < below || (above == below && (hi & 1) == 0)) lo = hi;
  }
  return (std::signbit(x) ? 1u << sign_shift : 0u) | lo;
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

// Values spread over the narrow format's range so normals, denormals and overflow all occur.
float random_in_range(std::mt19937& rng, int min_exp, int max_exp) {
  return std::ldexp(static_cast<float>(static_cast<int32_t>(rng())) / 2147483648.0f,
                    min_exp + static_cast<int>(rng() % static_cast<unsigned>(max_exp - min_exp)));
}

TEST(FloatRounding, F16MatchesNearestValueSearch) {
  std::mt19937 rng(2);
  for (int i = 0; i < 100000; ++i) {
    const float x = random_in_range(rng, -30, 17);
    if (std::fabs(x) >= 65520.0f) {  // half an ulp past the largest finite f16: infinity
      EXPECT_TRUE(std::isinf(narrow_float_value(round_f32_to(x, DType::kF16), DType::kF16))) << x;
      continue;
    }
    ASSERT_EQ(round_f32_to(x, DType::kF16), nearest_by_search(x, DType::kF16, 0x7bff, 15)) << x;
#if defined(__FLT16_MAX__)
    // Where the compiler has _Float16, its conversion is a second, independent reference.
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(round_f32_to(x, DType::kF16), bits) << x;
#endif
  }
}

TEST(FloatRounding, Fp8MatchesNearestValueSearch) {
  std::mt19937 rng(3);
  struct Case {
    DType dtype;
    uint32_t max_finite;
    double overflow;  // half an ulp past the largest finite value
  };
  for (const Case& c : {Case{DType::kF8E4M3, 0x7e, 464.0}, Case{DType::kF8E5M2, 0x7b, 61440.0}}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = random_in_range(rng, -20, 17);
      const uint32_t got = round_f32_to(x, c.dtype);
      if (std::fabs(x) >= c.overflow) {
        const double v = narrow_float_value(got, c.dtype);
        EXPECT_TRUE(c.dtype == DType::kF8E4M3 ? std::isnan(v) : std::isinf(v)) << x;
        continue;
      }
      ASSERT_EQ(got, nearest_by_search(x, c.dtype, c.max_finite, 7)) << dtype_name(c.dtype) << " " << x;
    }
  }
}

TEST(FloatRounding, ArraysRoundAsEachElementDoes) {
  // Random patterns (NaNs of every payload, infinities and denormals among them), the edges of
  // every binade's rounding, and the values that overflow.
  std::mt19937 rng(4);
  std::vector<float> in;
  for (int i = 0; i < 100000; ++i) in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u, 0x3f808000u,
                     0x3f818000u, 0x7f7fffffu, 0xff7f8000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u,
                     0x7fffffffu, 0x477ff000u, 0x43e80000u}) {
    in.push_back(std::bit_cast<float>(u));
  }
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF8E5M2, DType::kF32}) {
    const size_t size = dtype_size(dtype);
    std::vector<uint8_t> out(in.size() * size + 1, 0xab);
    round_f32s_to(in, out.data(), dtype);
    for (size_t i = 0; i < in.size(); ++i) {
      uint32_t got = 0;
      std::memcpy(&got, out.data() + i * size, size);
      ASSERT_EQ(got, round_f32_to(in[i], dtype)) << dtype_name(dtype) << " " << std::hex << std::bit_cast<uint32_t>(in[i]);
    }
    EXPECT_EQ(out.back(), 0xab) << "wrote past the end: " << dtype_name(dtype);
    round_f32s_to({}, nullptr, dtype);  // nothing to round: nothing touched
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

TEST(ModelLayout, MoeAddsUpExactlyWithTensorsInTheThousands) {
  for (uint64_t total : {uint64_t{1000}, uint64_t{1} << 20, uint64_t{67108864}, uint64_t{268435456}}) {
    auto layout = moe_layout(total, DType::kBF16);
    uint64_t sum = 0;
    size_t experts = 0;
    for (const auto& t : layout) {
      sum += t.numel();
      experts += t.name.find(".experts.") != std::string::npos;
    }
    EXPECT_EQ(sum, total);
    if (total >= (uint64_t{64} << 20)) {
      EXPECT_GT(experts, 2000u) << total;
    }
  }
}

// Tensor-parallel views of the synthetic transformer: each rank's views resolve, the split
// tensors are held once across the ranks and the rest by every rank, and qkv is fused.
TEST(ModelLayout, TensorParallelViewsSplitTheMatricesAndFuseQkv) {
  const auto model = transformer_layout(8 << 20, DType::kBF16);
  for (uint32_t world : {1u, 2u, 4u}) {
    std::vector<Layout> ranks;
    for (uint32_t rank = 0; rank < world; ++rank) {
      auto views = tensor_parallel_views(model, rank, world);
      ASSERT_TRUE(views.ok()) << views.status().to_string();
      auto layout = Layout::resolve(model, *views);
      ASSERT_TRUE(layout.ok()) << layout.status().to_string();
      ranks.push_back(std::move(layout).value());
    }
    const auto& specs = ranks[0].local_specs();
    const auto qkv = std::find_if(specs.begin(), specs.end(), [](const TensorSpec& t) { return t.name == "layers.0.attn.qkv_proj.weight"; });
    ASSERT_NE(qkv, specs.end());
    const uint64_t h = model[0].shape[1];
    EXPECT_EQ(qkv->shape, (std::vector<uint64_t>{3 * h / world, h}));
    for (uint32_t t = 0; t < model.size(); ++t) {
      uint64_t held = 0;
      for (const Layout& l : ranks) held += l.held_elements(t);
      const bool split = model[t].shape.size() == 2;  // every matrix of this model is split
      EXPECT_EQ(held, split ? model[t].numel() : world * model[t].numel()) << model[t].name << " over " << world;
    }
  }
  EXPECT_FALSE(tensor_parallel_views(model, 2, 2).ok());
  EXPECT_FALSE(tensor_parallel_views(model, 0, 0).ok());
  const auto too_many = tensor_parallel_views({{"embed.weight", DType::kBF16, {3, 8}}}, 0, 4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("'embed.weight': dimension 0 has 3 entries, fewer than 4 ranks"),
            std::string::npos);
}

TEST(ModelLayout, TrainerShardsTileTheModelOnceWithRowColumnAndFlatPieces) {
  for (uint64_t elements : {uint64_t{1} << 16, uint64_t{8} << 20}) {
    const auto model = transformer_layout(elements, DType::kBF16);
    for (uint32_t world : {1u, 2u, 3u, 4u}) {
      std::vector<Layout> ranks;
      for (uint32_t rank = 0; rank < world; ++rank) {
        auto shards = trainer_shards(model, rank, world);
        ASSERT_TRUE(shards.ok()) << shards.status().to_string();
        auto layout = Layout::resolve(model, *shards);
        ASSERT_TRUE(layout.ok()) << layout.status().to_string();
        ranks.push_back(std::move(layout).value());
      }
      EXPECT_TRUE(check_tiling(model, ranks).ok()) << check_tiling(model, ranks).to_string() << " over " << world;
    }
  }
  const auto model = transformer_layout(8 << 20, DType::kBF16);
  const auto shards = trainer_shards(model, 1, 4).value();
  const auto find = [&](const std::string& name) {
    return *std::find_if(shards.begin(), shards.end(), [&](const LocalTensorSpec& l) { return l.name == name; });
  };
  EXPECT_FALSE(find("layers.0.attn.q.weight").pieces[0].flat);
  EXPECT_EQ(find("layers.0.attn.q.weight").pieces[0].dim, 0u);
  EXPECT_EQ(find("layers.0.attn.o.weight").pieces[0].dim, 1u);
  EXPECT_EQ(find("layers.0.mlp.down.weight").pieces[0].dim, 1u);
  const PieceSpec embed = find("embed.weight").pieces[0];
  EXPECT_TRUE(embed.flat);
  EXPECT_NE(embed.begin % model[0].shape[1], 0u) << "the flat cut falls on a row boundary";
  EXPECT_FALSE(trainer_shards(model, 4, 4).ok());
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
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kF32}) {
    TraceOptions options;
    options.publish_dtype = dtype;
    auto trace = RlTrace::create({{"w", DType::kBF16, {4096}}}, options);
    ASSERT_TRUE(trace.ok());
    (*trace)->step();
    EXPECT_EQ((*trace)->manifest()[0].dtype, dtype);
    const TensorView& v = (*trace)->published()[0];
    for (uint64_t i = 0; i < v.numel; ++i) {
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
