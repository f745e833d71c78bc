// Round trips through the real encoder and applier: every dtype, both value
// codecs, with and without zstd, densities from nothing to everything, sizes
// from empty to multi-chunk. The consumer must end bit-identical to the
// producer, and so must the producer's shadow.
#include <gtest/gtest.h>

#include <random>

#include "sparse/format.h"
#include "support/codec_harness.h"

namespace deltacast {
namespace {

using testing::TensorSet;

struct Density {
  const char* name;
  double fraction;  // of the elements; -1 means exactly one element
};

constexpr Density kDensities[] = {{"0", 0.0},   {"1 element", -1.0}, {"0.1%", 0.001}, {"1%", 0.01},
                                  {"10%", 0.1}, {"50%", 0.5},        {"100%", 1.0}};

// Sizes: empty, one element, odd, and several chunks plus a partial one (chunk_bytes is 4 KiB below).
constexpr uint64_t kSizes[] = {0, 1, 1001, 9 * 4096 + 77};

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, EveryCodecDensityAndSize) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 1000 + 1);
  for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
    for (int zstd : {0, 3}) {
      for (uint64_t size : kSizes) {
        for (const Density& density : kDensities) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << value_codec_name(codec) << " zstd " << zstd
                                            << " size " << size << " density " << density.name);
          // Two tensors so that chunks of different tensors share buckets.
          Manifest manifest = testing::make_manifest({{"a", dtype, {size}}, {"b", dtype, {3, 5}}});
          CodecOptions options;
          options.value_codec = codec;
          options.zstd_level = zstd;
          options.chunk_bytes = 4096;
          options.bucket_bytes = 8192;
          options.threads = 2;
          auto encoder = DeltaEncoder::create(manifest, options);
          ASSERT_TRUE(encoder.ok());
          DeltaApplier applier(manifest, 2);

          TensorSet base(manifest), current(manifest), consumer(manifest), fresh(manifest);
          testing::fill_random_bits(base, rng);
          current.copy_from(base);
          consumer.copy_from(base);
          for (auto& t : current.tensors) {
            const uint64_t n = t.view().numel;
            const uint64_t changes = density.fraction < 0
                                         ? std::min<uint64_t>(1, n)
                                         : static_cast<uint64_t>(density.fraction * static_cast<double>(n));
            testing::apply_random_changes(t, changes, rng);
          }
          auto shadow = Shadow::copy_of(manifest, base.views(), 1);
          ASSERT_TRUE(shadow.ok());
          const auto current_views = current.views();
          auto delta = encoder->encode_delta(current_views, *shadow, 2);
          ASSERT_TRUE(delta.ok()) << delta.status().to_string();
          EXPECT_EQ(shadow->version(), 2u);
          for (size_t i = 0; i < manifest.size(); ++i) {
            ASSERT_EQ(std::memcmp(shadow->view(i).data, current.tensors[i].data(), current.tensors[i].nbytes()), 0)
                << "shadow must equal the published version";
          }
          Status applied = testing::verify_and_apply(applier, delta->buckets, 1, consumer);
          ASSERT_TRUE(applied.ok()) << applied.to_string();
          EXPECT_TRUE(consumer.same_bits(current));
          EXPECT_TRUE(consumer.guards_intact());
          if (density.fraction == 0.0) {
            EXPECT_EQ(delta->stats.changed, 0u);
            EXPECT_EQ(delta->buckets.size(), 1u) << "an empty version is still one (empty) bucket";
          }
          // A full sync of the same version brings a consumer holding nothing to the same bits.
          auto full = encoder->encode_full(current_views, 2);
          ASSERT_TRUE(full.ok());
          Status full_applied = testing::verify_and_apply(applier, full->buckets, std::nullopt, fresh);
          ASSERT_TRUE(full_applied.ok()) << full_applied.to_string();
          EXPECT_TRUE(fresh.same_bits(current));
          EXPECT_TRUE(fresh.guards_intact());
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, RoundTrip, ::testing::ValuesIn(kAllDTypes),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(dtype_name(param.param));
                         });

TEST(RoundTrip, OutputDoesNotDependOnThreadCount) {
  Manifest manifest = testing::make_manifest({{"w", DType::kBF16, {300000}}, {"v", DType::kF32, {5000}}});
  std::mt19937_64 rng(11);
  TensorSet base(manifest), current(manifest);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 50, rng);
  std::vector<std::vector<uint8_t>> reference;
  for (unsigned threads : {1u, 2u, 5u}) {
    CodecOptions options;
    options.threads = threads;
    options.chunk_bytes = 16384;
    options.zstd_level = 1;
    auto delta = testing::encode_delta(manifest, options, base, current, 1, 2);
    ASSERT_TRUE(delta.ok());
    if (reference.empty()) reference = delta->buckets;
    EXPECT_EQ(delta->buckets, reference) << threads << " threads";
  }
}

TEST(RoundTrip, SuccessiveVersionsChain) {
  Manifest manifest = testing::make_manifest({{"w", DType::kBF16, {50000}}});
  std::mt19937_64 rng(12);
  TensorSet current(manifest), consumer(manifest);
  testing::fill_random_bits(current, rng);
  auto encoder = DeltaEncoder::create(manifest, CodecOptions{});
  DeltaApplier applier(manifest, 1);
  auto shadow = Shadow::copy_of(manifest, current.views(), 1);
  const auto views = current.views();
  ASSERT_TRUE(testing::verify_and_apply(applier, encoder->encode_full(views, 1)->buckets, std::nullopt, consumer).ok());
  for (uint64_t v = 2; v <= 6; ++v) {
    testing::apply_random_changes(current.tensors[0], 400, rng);
    auto delta = encoder->encode_delta(views, *shadow, v);
    ASSERT_TRUE(delta.ok());
    EXPECT_EQ(delta->base_version, v - 1);
    ASSERT_TRUE(testing::verify_and_apply(applier, delta->buckets, v - 1, consumer).ok());
    EXPECT_TRUE(consumer.same_bits(current)) << "version " << v;
  }
}

// The producer may add the zstd stage per version (a slow WAN): the choice sees the version's
// chunks without it, the level it picks is applied to every chunk, and the consumer applies the
// result exactly, versions with and without it in one chain.
TEST(RoundTrip, AZstdStageChosenPerVersionAppliesExactly) {
  Manifest manifest = testing::make_manifest({{"w", DType::kBF16, {200000}}});
  std::mt19937_64 rng(31);
  TensorSet current(manifest), consumer(manifest);
  testing::fill_random_bits(current, rng);
  CodecOptions options;
  options.chunk_bytes = 16384;
  auto chosen = DeltaEncoder::create(manifest, options);
  auto plain = DeltaEncoder::create(manifest, options);
  ASSERT_TRUE(chosen.ok() && plain.ok());
  DeltaApplier applier(manifest, 1);
  auto shadow = Shadow::copy_of(manifest, current.views(), 1);
  auto plain_shadow = Shadow::copy_of(manifest, current.views(), 1);
  const auto views = current.views();
  ASSERT_TRUE(testing::verify_and_apply(applier, chosen->encode_full(views, 1)->buckets, std::nullopt, consumer).ok());
  for (uint64_t v = 2; v <= 5; ++v) {
    // An optimizer-like step: every 23rd weight to one of a few values (zstd finds the repeats).
    auto* w = reinterpret_cast<uint16_t*>(current.tensors[0].data());
    for (uint64_t i = v; i < 200000; i += 23) w[i] = static_cast<uint16_t>(0x3f80 + (i / 23 + v) % 4);
    const int wanted = v % 2 == 0 ? 1 : 0;
    size_t seen = 0;
    auto delta = chosen->encode_delta(views, *shadow, v, [&](std::span<const std::span<const uint8_t>> chunks) {
      for (const auto& chunk : chunks) {
        if (chunk.empty()) continue;
        ++seen;
        EXPECT_EQ(ChunkHeader::parse(chunk)->compression, Compression::kNone) << "offered with the zstd stage";
      }
      return wanted;
    });
    auto reference = plain->encode_delta(views, *plain_shadow, v);
    ASSERT_TRUE(delta.ok() && reference.ok());
    EXPECT_GT(seen, 1u);
    EXPECT_EQ(delta->stats.zstd_level, wanted);
    if (wanted != 0) {
      EXPECT_LT(delta->stats.wire_bytes, reference->stats.wire_bytes * 9 / 10) << "version " << v;
    } else {
      EXPECT_EQ(delta->buckets, reference->buckets) << "version " << v;
    }
    ASSERT_TRUE(testing::verify_and_apply(applier, delta->buckets, v - 1, consumer).ok());
    EXPECT_TRUE(consumer.same_bits(current)) << "version " << v;
  }
}

}  // namespace
}  // namespace deltacast
