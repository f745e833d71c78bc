// The engine's handling of GPU tensors (producer.cc, consumer.cc), on machines without a GPU:
// this executable defines the device codec's factories itself (sparse/device_codec.h), so the
// linker takes them instead of the CUDA implementation or the refusal, and "device" tensors are
// host memory marked as CUDA device 0, encoded and applied by the CPU codec. What is checked is
// the engine's part: which path each version takes, when the producer copies its device shadow
// to the host shadow (only when a full sync needs it: never per delta, and checks hash the
// device shadow where it is), and that every consumer ends exact. The GPU's own part is tests/cuda/gpu_engine_test.cc,
// on a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/producer.h"
#include "core/hash.h"
#include "core/thread_pool.h"
#include "sparse/delta_applier.h"
#include "sparse/device_codec.h"
#include "sparse/shadow.h"
#include "support/engine_harness.h"
#include "support/test_tensors.h"

namespace deltacast {

namespace {

struct Calls {
  std::atomic<int> assign{0}, encode{0}, copy_shadow{0}, shadow_hash{0}, apply{0}, copy_in{0}, hash{0};
  std::atomic<bool> host_shadow{false};
  std::atomic<bool> refuse_next{false};  // the next apply fails verification, as a forged version does on a GPU
};
Calls calls;

std::vector<TensorView> as_host(std::span<const TensorView> views) {
  std::vector<TensorView> out(views.begin(), views.end());
  for (auto& v : out) {
    EXPECT_EQ(v.device, (Device{DeviceKind::kCuda, 0})) << "a tensor reached the device codec from elsewhere";
    v.device = Device{};
  }
  return out;
}

class HostBackedEncoder final : public DeviceEncoder {
 public:
  HostBackedEncoder(Manifest manifest, CodecOptions options) : manifest_(std::move(manifest)), options_(options) {}
  Status assign(std::span<const TensorView> tensors, uint64_t version) override {
    ++calls.assign;
    DC_ASSIGN_OR_RETURN(Shadow copy, Shadow::copy_of(manifest_, as_host(tensors), version));
    shadow_ = std::make_unique<Shadow>(std::move(copy));
    return Status();
  }
  Result<EncodedVersion> encode_delta(std::span<const TensorView> current, uint64_t target_version,
                                      const ZstdChoice& choose) override {
    ++calls.encode;
    if (!shadow_) return failed_precondition("no full version yet");
    if (!encoder_) DC_RETURN_IF_ERROR(set_cuts({}));
    return encoder_->encode_delta(as_host(current), *shadow_, target_version, choose);
  }
  Status set_cuts(std::span<const std::vector<uint64_t>> cuts) override {
    DC_ASSIGN_OR_RETURN(DeltaEncoder encoder, DeltaEncoder::create(manifest_, options_, cuts));
    encoder_ = std::make_unique<DeltaEncoder>(std::move(encoder));
    return Status();
  }
  Status copy_shadow(std::span<const TensorView> host) override {
    ++calls.copy_shadow;
    for (size_t i = 0; i < host.size(); ++i) std::memcpy(host[i].data, shadow_->view(i).data, host[i].nbytes());
    return Status();
  }
  Result<uint64_t> shadow_hash() override {
    ++calls.shadow_hash;
    if (!shadow_) return failed_precondition("no full version yet");
    ThreadPool pool(1);
    return model_hash(shadow_->views().data(), shadow_->views().size(), pool);
  }
  uint64_t version() const override { return shadow_ ? shadow_->version() : 0; }

 private:
  Manifest manifest_;
  CodecOptions options_;
  std::unique_ptr<Shadow> shadow_;
  std::unique_ptr<DeltaEncoder> encoder_;
};

class HostBackedApplier final : public DeviceApplier {
 public:
  explicit HostBackedApplier(const Manifest& manifest) : applier_(manifest, 1), pool_(1) {}
  Status apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held,
               std::span<const TensorView> targets) override {
    ++calls.apply;
    if (calls.refuse_next.exchange(false)) return corrupt("chunk 0: malformed index block (refused for the test)");
    DC_ASSIGN_OR_RETURN(VersionChunks chunks, applier_.verify(buckets, held));
    return applier_.apply(chunks, as_host(targets));
  }
  Status copy_in(std::span<const TensorView> image, std::span<const TensorView> targets) override {
    ++calls.copy_in;
    for (size_t i = 0; i < targets.size(); ++i) std::memcpy(targets[i].data, image[i].data, targets[i].nbytes());
    return Status();
  }
  Result<uint64_t> model_hash(std::span<const TensorView> tensors) override {
    ++calls.hash;
    const auto host = as_host(tensors);
    return ::deltacast::model_hash(host.data(), host.size(), pool_);
  }

 private:
  DeltaApplier applier_;
  ThreadPool pool_;
};

}  // namespace

// The seam: these replace the library's definitions in this executable.
bool device_codec_built() { return true; }

Result<std::unique_ptr<DeviceEncoder>> make_device_encoder(const Manifest& manifest, const CodecOptions& options,
                                                           int device, uintptr_t, bool host_shadow) {
  EXPECT_EQ(device, 0);
  calls.host_shadow = host_shadow;
  std::unique_ptr<DeviceEncoder> encoder = std::make_unique<HostBackedEncoder>(manifest, options);
  return encoder;
}

Result<std::unique_ptr<DeviceApplier>> make_device_applier(const Manifest& manifest, int device, uintptr_t, unsigned) {
  EXPECT_EQ(device, 0);
  std::unique_ptr<DeviceApplier> applier = std::make_unique<HostBackedApplier>(manifest);
  return applier;
}

namespace {

using testing::TensorSet;

std::vector<TensorView> on_gpu0(const TensorSet& set) {
  auto views = set.views();
  for (auto& v : views) v.device = Device{DeviceKind::kCuda, 0};
  return views;
}

TEST(DevicePlumbing, DeltasStayOnTheDeviceAndTheHostShadowIsCopiedOnlyWhenNeeded) {
  calls.assign = calls.encode = calls.copy_shadow = calls.shadow_hash = calls.apply = calls.copy_in = calls.hash = 0;
  std::mt19937_64 rng(21);
  const Manifest m = testing::make_manifest({{"w", DType::kBF16, {300, 64}}, {"n", DType::kF32, {64}},
                                             {"e", DType::kBF16, {0}}});
  TensorSet current(m), on_device(m), on_host(m), late(m);
  testing::fill_random_bits(current, rng);
  ProducerOptions options;
  options.trust = testing::engine_trust();
  options.rails = {Endpoint{"127.0.0.1", 0}};
  options.codec.threads = 1;
  options.shadow = "host";
  auto producer = Producer::create(m, on_gpu0(current), options);
  ASSERT_TRUE(producer.ok()) << producer.status().to_string();
  EXPECT_TRUE(calls.host_shadow) << "shadow=\"host\" did not reach the device encoder";
  auto gpu = testing::start_consumer(m, on_gpu0(on_device), **producer, "gpu");
  auto host = testing::start_consumer(m, on_host.views(), **producer, "host");
  ASSERT_TRUE(gpu && host);
  ASSERT_TRUE((*producer)->wait_members(2, testing::kEngineWait).ok());
  uint64_t v = 0;
  for (int step = 0; step < 5; ++step) {
    if (step > 0) {
      for (auto& t : current.tensors) testing::apply_random_changes(t, t.view().numel / 20 + 1, rng);
    }
    v = (*producer)->publish().value();
    ASSERT_TRUE((*producer)->wait(v, testing::kEngineWait).ok());
  }
  // One full version and four deltas: encoded on the device; the host shadow copied once, for
  // the full version's image; the device consumer applied four deltas and copied one image in.
  EXPECT_EQ(calls.assign, 1);
  EXPECT_EQ(calls.encode, 4);
  EXPECT_EQ(calls.copy_shadow, 1) << "the host shadow was copied for deltas";
  EXPECT_EQ(calls.apply, 4);
  EXPECT_EQ(calls.copy_in, 1);
  EXPECT_TRUE(on_device.same_bits(current));
  EXPECT_TRUE(on_host.same_bits(current));

  // A check after deltas hashes the device shadow where it is (no copy to the host), once per
  // version; the device consumer hashes on the device.
  testing::expect_all_exact(**producer, v, 2);
  EXPECT_EQ(calls.shadow_hash, 1);
  EXPECT_EQ(calls.copy_shadow, 1) << "a check copied the shadow to the host";
  EXPECT_GE(calls.hash, 1);
  testing::expect_all_exact(**producer, v, 2);
  EXPECT_EQ(calls.shadow_hash, 1) << "a second check of the same version hashed the shadow again";

  // A consumer joining late is caught up by a full sync of the newest version, from the host
  // shadow, refreshed for it; then another delta and a check: hashed on the device again.
  auto third = testing::start_consumer(m, on_gpu0(late), **producer, "late");
  ASSERT_TRUE(third);
  ASSERT_TRUE(third->wait_version(v, testing::kEngineWait).ok());
  EXPECT_TRUE(late.same_bits(current));
  for (auto& t : current.tensors) testing::apply_random_changes(t, 7, rng);
  v = (*producer)->publish().value();
  ASSERT_TRUE((*producer)->wait(v, testing::kEngineWait).ok());
  EXPECT_EQ(calls.copy_shadow, 2);
  testing::expect_all_exact(**producer, v, 3);
  EXPECT_EQ(calls.copy_shadow, 2);
  EXPECT_EQ(calls.shadow_hash, 2);
  for (const TensorSet* set : {&on_device, &on_host, &late}) {
    EXPECT_TRUE(set->same_bits(current));
    EXPECT_TRUE(set->guards_intact());
  }
  third->close();
  gpu->close();
  host->close();
  (*producer)->close();
}

TEST(DevicePlumbing, AVersionTheDeviceRefusesFailsItsCommitAndAFullSyncRepairs) {
  // A device consumer whose device refuses a delta at commit: the tensors keep the version they
  // held, the producer hears of the failure, and a full sync brings the consumer up to date.
  calls.apply = calls.copy_in = 0;
  std::mt19937_64 rng(22);
  const Manifest m = testing::make_manifest({{"w", DType::kBF16, {4096}}});
  TensorSet current(m), target(m), before(m);
  testing::fill_random_bits(current, rng);
  ProducerOptions options;
  options.trust = testing::engine_trust();
  options.rails = {Endpoint{"127.0.0.1", 0}};
  options.codec.threads = 1;
  auto producer = Producer::create(m, current.views(), options);  // a host producer, a device consumer
  ASSERT_TRUE(producer.ok());
  auto gpu = testing::start_consumer(m, on_gpu0(target), **producer, "gpu");
  ASSERT_TRUE(gpu);
  ASSERT_TRUE((*producer)->wait_members(1, testing::kEngineWait).ok());
  const uint64_t v1 = (*producer)->publish().value();
  ASSERT_TRUE((*producer)->wait(v1, testing::kEngineWait).ok());
  EXPECT_TRUE(target.same_bits(current));
  before.copy_from(target);
  for (auto& t : current.tensors) testing::apply_random_changes(t, 50, rng);
  calls.refuse_next = true;
  const uint64_t v2 = (*producer)->publish().value();
  // The round ends with the member failed; wait() then sees it committed after the full sync.
  ASSERT_TRUE((*producer)->wait(v2, testing::kEngineWait).ok());
  const auto report = (*producer)->report(v2);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->failed, 1u);
  ASSERT_EQ(report->why_not.count("gpu"), 1u) << "the report does not say why the consumer failed";
  EXPECT_NE(report->why_not.at("gpu").find("refused for the test"), std::string::npos) << report->why_not.at("gpu");
  EXPECT_EQ(report->committed, 0u);
  EXPECT_GE(gpu->state().failures, 1u);
  EXPECT_EQ(calls.copy_in, 2) << "no full sync repaired the consumer";
  EXPECT_TRUE(target.same_bits(current));
  EXPECT_TRUE(target.guards_intact());
  gpu->close();
  (*producer)->close();
}

}  // namespace
}  // namespace deltacast
