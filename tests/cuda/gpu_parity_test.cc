// GPU against CPU: the device encoder must produce the CPU encoder's bytes,
// the device applier must produce the CPU applier's tensors, and both must
// reject what the CPU rejects without writing. Exits 77 (CTest: skipped)
// when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>

#include "core/hash.h"
#include "sparse/cuda/cuda_check.h"
#include "sparse/cuda/device_buffer.h"
#include "sparse/cuda/gpu_applier.h"
#include "sparse/cuda/gpu_encoder.h"
#include "sparse/cuda/gpu_hash.h"
#include "support/bucket_forge.h"
#include "support/codec_harness.h"
#include "support/device_set.h"

namespace deltacast {
namespace {

using testing::DeviceSet;
using testing::TensorSet;

TEST(GpuHash, EqualsCpuContentHash) {
  std::mt19937_64 rng(1);
  std::vector<size_t> sizes = {0, 1, 15, 16, 17, 128, 129, 240, 241, 1024, 65535, 65536, 65537, 1 << 20, (5 << 20) + 3};
  std::vector<std::vector<uint8_t>> host;
  std::vector<DeviceBuffer> device(sizes.size());
  std::vector<DeviceRange> ranges;
  for (size_t i = 0; i < sizes.size(); ++i) {
    host.emplace_back(sizes[i]);
    for (auto& b : host.back()) b = static_cast<uint8_t>(rng());
    ASSERT_TRUE(device[i].reserve(sizes[i]).ok());
    cudaMemcpy(device[i].data(), host[i].data(), sizes[i], cudaMemcpyHostToDevice);
    ranges.push_back({device[i].data(), sizes[i]});
  }
  std::vector<uint64_t> out(sizes.size());
  ASSERT_TRUE(gpu_content_hashes(ranges, out).ok());
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(out[i], content_hash(host[i].data(), sizes[i])) << sizes[i];
}

Manifest mixed_manifest(uint64_t size) {
  std::vector<TensorSpec> specs;
  for (DType d : kAllDTypes) specs.push_back({std::string(dtype_name(d)), d, {size}});
  specs.push_back({"empty", DType::kBF16, {0}});
  specs.push_back({"one", DType::kF32, {1}});
  return testing::make_manifest(specs);
}

TEST(GpuEncoder, BucketsEqualTheCpuEncoder) {
  std::mt19937_64 rng(2);
  for (uint64_t size : {uint64_t{1}, uint64_t{4099}, uint64_t{70001}}) {
    const Manifest m = mixed_manifest(size);
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (int zstd : {0, 3}) {
        for (double density : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
          SCOPED_TRACE(::testing::Message() << "size " << size << " " << value_codec_name(codec) << " zstd " << zstd
                                            << " density " << density);
          TensorSet base(m), current(m);
          testing::random_version_pair(base, current, density, rng);
          CodecOptions options;
          options.value_codec = codec;
          options.zstd_level = zstd;
          options.chunk_bytes = 8192;  // several chunks per tensor
          options.bucket_bytes = 16384;
          auto cpu = testing::encode_delta(m, options, base, current, 1, 2);
          ASSERT_TRUE(cpu.ok());
          auto gpu = GpuDeltaEncoder::create(m, options);
          ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
          DeviceSet d_base(base), d_current(current);
          auto shadow = GpuShadow::copy_of(m, d_base.views(), 1);
          ASSERT_TRUE(shadow.ok());
          auto encoded = (*gpu)->encode_delta(d_current.views(), *shadow, 2);
          ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
          EXPECT_EQ(encoded->stats.changed, cpu->stats.changed);
          ASSERT_EQ(encoded->buckets.size(), cpu->buckets.size());
          for (size_t b = 0; b < cpu->buckets.size(); ++b) EXPECT_EQ(encoded->buckets[b], cpu->buckets[b]) << "bucket " << b;
          TensorSet shadow_back(m);
          std::vector<TensorView> shadow_views(shadow->views().begin(), shadow->views().end());
          for (size_t i = 0; i < m.size(); ++i) {
            cudaMemcpy(shadow_back.tensors[i].data(), shadow_views[i].data, shadow_views[i].nbytes(), cudaMemcpyDeviceToHost);
          }
          EXPECT_TRUE(shadow_back.same_bits(current)) << "the device shadow must become the current version";
        }
      }
    }
  }
}

// The applier's two ways to the apply pass, and the limit that chooses between them.
struct ApplyWay {
  const char* name;
  GpuApplyOptions options;
  bool keeps;  // whether a version with sparse chunks has its changes kept
};
const ApplyWay kApplyWays[] = {
    {"changes kept", GpuApplyOptions{}, true},
    {"decoded again", GpuApplyOptions{.kept_changes_limit_bytes = 0}, false},
    {"the changes over the memory limit", GpuApplyOptions{.kept_changes_limit_bytes = 1024}, false},
};

TEST(GpuApplier, AppliesLikeTheCpuIncludingFullSyncsAndSpecialValues) {
  for (const ApplyWay& way : kApplyWays) {
    SCOPED_TRACE(way.name);
    std::mt19937_64 rng(3);
    const Manifest m = mixed_manifest(30011);
    auto applier = GpuApplier::create(m, 0, 0, way.options);
    ASSERT_TRUE(applier.ok());
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (double density : {0.0, 0.002, 0.05, 0.3, 0.7}) {  // 0.3: a chunk of more groups than a warp has lanes
        TensorSet base(m), current(m), cpu_target(m), gpu_result(m);
        testing::random_version_pair(base, current, density, rng);
        CodecOptions options;
        options.value_codec = codec;
        options.zstd_level = density > 0.5 ? 1 : 0;
        auto delta = testing::encode_delta(m, options, base, current, 4, 5);
        ASSERT_TRUE(delta.ok());
        DeviceSet target(base);
        ASSERT_TRUE((*applier)->apply(testing::bucket_spans(delta->buckets), 4, target.views()).ok());
        target.download(gpu_result);
        EXPECT_TRUE(gpu_result.same_bits(current)) << value_codec_name(codec) << " " << density;
        EXPECT_TRUE(target.guards_intact());
        if (density > 0 && density < 0.5) {
          EXPECT_EQ((*applier)->last_timings().kept_changes, way.keeps) << density;
        }
        // A full sync onto zeros.
        auto full = DeltaEncoder::create(m, options)->encode_full(current.views(), 5);
        DeviceSet fresh(TensorSet{m});
        ASSERT_TRUE((*applier)->apply(testing::bucket_spans(full->buckets), std::nullopt, fresh.views()).ok());
        fresh.download(gpu_result);
        EXPECT_TRUE(gpu_result.same_bits(current));
        EXPECT_TRUE(fresh.guards_intact());
      }
    }
  }
}

// A tensor above 2^32 elements, as one chunk (in-chunk positions and gaps above 2^31 and 2^32)
// and in default chunks: positions are 64-bit on the device too.
// Changes are kept in default chunks, and decoded again in the one chunk (offsets above 32 bits).
TEST(GpuApplier, ATensorAboveTwoToTheThirtyTwoElements) {
  const uint64_t n = (uint64_t{1} << 32) + 4099;
  const Manifest m = testing::make_manifest({{"huge", DType::kI8, {n}}});
  TensorSet base(m), current(m), result(m);
  const std::vector<uint64_t> positions = {
      0,     1u << 20, (uint64_t{1} << 31) - 1, uint64_t{1} << 31, (uint64_t{1} << 32) - 1, uint64_t{1} << 32,
      n - 2, n - 1};
  auto applier = GpuApplier::create(m);
  ASSERT_TRUE(applier.ok());
  DeviceSet target(base);
  uint64_t version = 1;
  for (bool one_chunk : {true, false}) {
    SCOPED_TRACE(one_chunk ? "one chunk over the whole tensor" : "default chunking");
    for (uint64_t p : positions) testing::set_element_bits(current.tensors[0], p, one_chunk ? 0x5a : 0x33);
    CodecOptions options;
    options.value_codec = ValueCodec::kRaw;
    if (one_chunk) options.chunk_bytes = uint64_t{8} << 30;
    auto delta = testing::encode_delta(m, options, base, current, version, version + 1);
    ASSERT_TRUE(delta.ok());
    ASSERT_TRUE((*applier)->apply(testing::bucket_spans(delta->buckets), version, target.views()).ok());
    EXPECT_EQ((*applier)->last_timings().kept_changes, !one_chunk);
    target.download(result);
    EXPECT_TRUE(result.same_bits(current));
    EXPECT_TRUE(target.guards_intact());
    base.copy_from(current);
    ++version;
  }
}

TEST(GpuApplier, TenThousandSmallTensorsInOneBucket) {
  std::mt19937_64 rng(4);
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 10000; ++i) specs.push_back({"expert." + std::to_string(i), DType::kBF16, {64 + rng() % 900}});
  const Manifest m = testing::make_manifest(specs);
  TensorSet base(m), current(m), result(m);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) testing::apply_random_changes(t, 1 + rng() % 8, rng);
  CodecOptions options;
  options.bucket_bytes = 64 << 20;  // everything in one bucket: one upload, one set of launches
  auto delta = testing::encode_delta(m, options, base, current, 1, 2);
  ASSERT_TRUE(delta.ok());
  ASSERT_EQ(delta->buckets.size(), 1u);
  for (const ApplyWay& way : kApplyWays) {
    SCOPED_TRACE(way.name);
    auto applier = GpuApplier::create(m, 0, 0, way.options);
    ASSERT_TRUE(applier.ok());
    DeviceSet target(base);
    ASSERT_TRUE((*applier)->apply(testing::bucket_spans(delta->buckets), 1, target.views()).ok());
    EXPECT_EQ((*applier)->last_timings().kept_changes, way.keeps);
    target.download(result);
    EXPECT_TRUE(result.same_bits(current));
  }
}

TEST(GpuApplier, RejectsWhatTheCpuRejectsAndWritesNothing) {
  std::mt19937_64 rng(5);
  const Manifest m = testing::make_manifest({{"w", DType::kBF16, {40000}}, {"i", DType::kI32, {5000}}});
  TensorSet base(m), current(m), result(m), cpu_target(m);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 40, rng);
  CodecOptions options;
  options.chunk_bytes = 16384;
  auto delta = testing::encode_delta(m, options, base, current, 1, 2);
  ASSERT_TRUE(delta.ok());
  auto kept = GpuApplier::create(m);
  auto decoded_again = GpuApplier::create(m, 0, 0, GpuApplyOptions{.kept_changes_limit_bytes = 0});
  ASSERT_TRUE(kept.ok() && decoded_again.ok());
  DeltaApplier cpu(m, 1);
  int rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const auto forged = testing::forged_version(delta->buckets, rng);
    cpu_target.copy_from(base);
    const bool cpu_ok = testing::verify_and_apply(cpu, forged, 1, cpu_target).ok();
    rejected += cpu_ok ? 0 : 1;
    for (GpuApplier* gpu : {kept->get(), decoded_again->get()}) {
      SCOPED_TRACE(gpu == kept->get() ? "changes kept" : "decoded again");
      DeviceSet target(base);
      const Status gpu_status = gpu->apply(testing::bucket_spans(forged), 1, target.views());
      ASSERT_EQ(gpu_status.ok(), cpu_ok) << "trial " << trial << ": " << gpu_status.to_string();
      target.download(result);
      ASSERT_TRUE(target.guards_intact()) << "trial " << trial;
      if (!cpu_ok) {
        ASSERT_TRUE(result.same_bits(base)) << "a rejected version wrote into the device tensors, trial " << trial;
      } else {
        ASSERT_TRUE(result.same_bits(cpu_target)) << "trial " << trial;
      }
    }
  }
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace deltacast

int main(int argc, char** argv) {
  if (deltacast::cuda_device_count() == 0) {
    std::printf("no usable CUDA device: GPU tests skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
