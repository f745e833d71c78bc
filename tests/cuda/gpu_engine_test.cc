// Producers and consumers on GPU tensors, over loopback TCP: a producer on device tensors feeding
// a consumer on device tensors (on a stream of its own) and one on host tensors, and a producer on
// host tensors feeding a device consumer; every version bit for bit, nothing written outside the
// tensors, and a forged version that never reaches them. Exits 77 (CTest: skipped) when no CUDA
// device is usable.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/producer.h"
#include "core/hash.h"
#include "core/thread_pool.h"
#include "sparse/cuda/cuda_check.h"
#include "sparse/device_codec.h"
#include "support/bucket_forge.h"
#include "support/codec_harness.h"
#include "support/device_set.h"
#include "support/engine_harness.h"

namespace deltacast {
namespace {

using testing::DeviceSet;
using testing::TensorSet;

// Special values, an empty tensor and chunks of several kinds (dense and sparse).
Manifest test_manifest() {
  return testing::make_manifest({{"embed", DType::kBF16, {3000, 64}},
                                 {"norm", DType::kF32, {64}},
                                 {"empty", DType::kBF16, {0}},
                                 {"ids", DType::kI32, {5000}},
                                 {"head", DType::kBF16, {77, 129}}});
}

ProducerOptions producer_options(const std::string& shadow = "device") {
  ProducerOptions options;
  options.shadow = shadow;
  options.trust = testing::engine_trust();
  options.rails = {Endpoint{"127.0.0.1", 0}};
  options.codec.threads = 2;
  options.codec.chunk_bytes = 65536;  // several chunks per tensor
  return options;
}

// `shadow`: where the producer keeps the version it diffs against ("device" or "host").
void device_producer_feeds_device_and_host_consumers(const std::string& shadow) {
  std::mt19937_64 rng(11);
  const Manifest m = test_manifest();
  TensorSet current(m), received(m), host_target(m);
  testing::fill_random_bits(current, rng);  // NaN, infinities, -0.0 and denormals among them
  DeviceSet trainer(current);
  TensorSet zero(m);
  DeviceSet rollout(zero);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  auto producer = Producer::create(m, std::vector<TensorView>(trainer.views().begin(), trainer.views().end()),
                                   producer_options(shadow));
  ASSERT_TRUE(producer.ok()) << producer.status().to_string();
  auto on_gpu = testing::start_consumer(m, {rollout.views().begin(), rollout.views().end()}, **producer, "gpu", 2,
                                         reinterpret_cast<uintptr_t>(stream));
  auto on_host = testing::start_consumer(m, host_target.views(), **producer, "host", 2);
  ASSERT_TRUE(on_gpu && on_host);
  ASSERT_TRUE((*producer)->wait_members(2, testing::kEngineWait).ok());
  for (int step = 0; step < 6; ++step) {
    if (step > 0) {
      for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 50, rng);
      trainer.upload(current);
    }
    auto v = (*producer)->publish(step == 3);  // a full version in the middle too
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_TRUE((*producer)->wait(*v, testing::kEngineWait).ok()) << "version " << *v;
    testing::expect_all_exact(**producer, *v, 2);
    rollout.download(received);
    EXPECT_TRUE(received.same_bits(current)) << "device consumer, version " << *v;
    EXPECT_TRUE(host_target.same_bits(current)) << "host consumer, version " << *v;
    EXPECT_TRUE(rollout.guards_intact() && host_target.guards_intact() && trainer.guards_intact());
    const auto report = (*producer)->report(*v);
    ASSERT_TRUE(report.has_value());
    EXPECT_EQ(report->full, step == 0 || step == 3);
    if (!report->full) {
      EXPECT_LT(report->stats.wire_bytes, m.total_bytes() / 2) << "a delta went out dense";
    }
  }
  on_gpu->close();
  on_host->close();
  (*producer)->close();
  cudaStreamDestroy(stream);
}

TEST(GpuEngine, ADeviceProducerFeedsDeviceAndHostConsumersBitForBit) {
  device_producer_feeds_device_and_host_consumers("device");
}

TEST(GpuEngine, AProducerWithItsShadowInHostMemoryDoesTheSame) {
  device_producer_feeds_device_and_host_consumers("host");
}

TEST(GpuEngine, AHostProducerFeedsADeviceConsumerAndALateOneCatchesUp) {
  std::mt19937_64 rng(12);
  const Manifest m = test_manifest();
  TensorSet current(m), received(m), zero(m);
  testing::fill_random_bits(current, rng);
  DeviceSet rollout(zero), late(zero);
  auto producer = Producer::create(m, current.views(), producer_options());
  ASSERT_TRUE(producer.ok()) << producer.status().to_string();
  auto first = testing::start_consumer(m, {rollout.views().begin(), rollout.views().end()}, **producer, "first", 2);
  ASSERT_TRUE(first);
  ASSERT_TRUE((*producer)->wait_members(1, testing::kEngineWait).ok());
  uint64_t v = 0;
  for (int step = 0; step < 4; ++step) {
    if (step > 0) {
      for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 30, rng);
    }
    v = (*producer)->publish().value();
    ASSERT_TRUE((*producer)->wait(v, testing::kEngineWait).ok());
  }
  // Caught up with a full sync.
  auto second = testing::start_consumer(m, {late.views().begin(), late.views().end()}, **producer, "late", 2);
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->wait_version(v, testing::kEngineWait).ok());
  testing::expect_all_exact(**producer, v, 2);
  for (const DeviceSet* set : {&rollout, &late}) {
    set->download(received);
    EXPECT_TRUE(received.same_bits(current));
    EXPECT_TRUE(set->guards_intact());
  }
  EXPECT_EQ(first->model_hash_now(), second->model_hash_now());
  first->close();
  second->close();
  (*producer)->close();
}

// What the consumer's commit does with a delta, through the interface it uses: a version whose
// buckets were forged (and resealed, so that only decoding finds the damage) is refused and
// writes nothing, and the GPU model hash equals the CPU one.
TEST(GpuEngine, AForgedVersionNeverTouchesTheDeviceTensors) {
  std::mt19937_64 rng(13);
  const Manifest m = test_manifest();
  TensorSet base(m), current(m), result(m);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 40, rng);
  CodecOptions options;
  options.chunk_bytes = 16384;
  auto delta = testing::encode_delta(m, options, base, current, 1, 2);
  ASSERT_TRUE(delta.ok());
  auto applier = make_device_applier(m, 0, 0, 2);
  ASSERT_TRUE(applier.ok()) << applier.status().to_string();
  ThreadPool pool(2);
  const auto base_views = base.views();
  const uint64_t base_hash = model_hash(base_views.data(), base_views.size(), pool);
  int rejected = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto forged = delta->buckets;
    auto& bucket = forged[rng() % forged.size()];
    bucket[testing::kFirstChunk + rng() % (bucket.size() - testing::kFirstChunk)] ^= static_cast<uint8_t>(1 + rng() % 255);
    testing::reseal(bucket);
    DeviceSet target(base);
    if ((*applier)->apply(testing::bucket_spans(forged), 1, target.views()).ok()) continue;
    ++rejected;
    target.download(result);
    ASSERT_TRUE(result.same_bits(base)) << "a refused version wrote into the device tensors, trial " << trial;
    ASSERT_TRUE(target.guards_intact());
    ASSERT_EQ((*applier)->model_hash(target.views()).value(), base_hash);
  }
  EXPECT_GT(rejected, 50);
  DeviceSet target(base);
  ASSERT_TRUE((*applier)->apply(testing::bucket_spans(delta->buckets), 1, target.views()).ok());
  target.download(result);
  EXPECT_TRUE(result.same_bits(current));
}

// The device encoder the producer uses, with chunks cut for resharded members: its buckets are
// the CPU encoder's, byte for byte.
TEST(GpuEngine, TheDeviceEncoderWithCutsMakesTheCpuEncodersBytes) {
  std::mt19937_64 rng(14);
  const Manifest m = test_manifest();
  TensorSet base(m), current(m);
  testing::fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 25, rng);
  CodecOptions options;
  options.chunk_bytes = 16384;
  const std::vector<std::vector<uint64_t>> cuts = {{1000, 70000}, {}, {}, {17}, {5000}};
  auto cpu = DeltaEncoder::create(m, options, cuts).value();
  auto shadow = Shadow::copy_of(m, base.views(), 1).value();
  auto expected = cpu.encode_delta(current.views(), shadow, 2).value();
  DeviceSet d_base(base), d_current(current);
  auto encoder = make_device_encoder(m, options, 0, 0).value();
  ASSERT_TRUE(encoder->assign(d_base.views(), 1).ok());
  ASSERT_TRUE(encoder->set_cuts(cuts).ok());
  auto got = encoder->encode_delta(d_current.views(), 2);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->buckets, expected.buckets);
  EXPECT_EQ(encoder->version(), 2u);
  TensorSet copied(m);
  ASSERT_TRUE(encoder->copy_shadow(copied.views()).ok());
  EXPECT_TRUE(copied.same_bits(current));
  // The shadow hashed on the GPU, as checks do: the CPU's model hash of the same tensors.
  ThreadPool pool(2);
  const auto views = current.views();
  auto hashed = encoder->shadow_hash();
  ASSERT_TRUE(hashed.ok()) << hashed.status().to_string();
  EXPECT_EQ(*hashed, model_hash(views.data(), views.size(), pool));
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
