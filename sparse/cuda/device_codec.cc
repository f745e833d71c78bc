// The engine's device codec (sparse/device_codec.h) over the GPU encoder and applier.
#include "sparse/device_codec.h"

#include <optional>

#include "core/hash.h"
#include "sparse/cuda/copy_views.h"
#include "sparse/cuda/cuda_check.h"
#include "sparse/cuda/gpu_applier.h"
#include "sparse/cuda/gpu_encoder.h"
#include "sparse/cuda/gpu_hash.h"

namespace deltacast {

bool device_codec_built() { return true; }

namespace {

cudaStream_t as_stream(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

// model_hash (core/hash.h) of tensors the device can read, computed on the GPU.
Result<uint64_t> gpu_model_hash(std::span<const TensorView> tensors, cudaStream_t stream) {
  std::vector<DeviceRange> ranges;
  for (const TensorView& t : tensors) ranges.push_back(DeviceRange{t.data, t.nbytes()});
  std::vector<uint64_t> hashes(tensors.size());
  DC_RETURN_IF_ERROR(gpu_content_hashes(ranges, hashes, stream));
  return model_hash_of(hashes);
}

class GpuDeviceEncoder final : public DeviceEncoder {
 public:
  GpuDeviceEncoder(Manifest manifest, CodecOptions options, int device, uintptr_t stream, ShadowMemory memory)
      : manifest_(std::move(manifest)),
        options_(options),
        device_(device),
        stream_(as_stream(stream)),
        memory_(memory) {}

  Status set_cuts(std::span<const std::vector<uint64_t>> cuts) override {
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    encoder_.reset();  // its staging is the size of the model: freed before the next one is made
    DC_ASSIGN_OR_RETURN(encoder_, GpuDeltaEncoder::create(manifest_, options_, device_, cuts));
    return Status();
  }

  Status assign(std::span<const TensorView> tensors, uint64_t version) override {
    DC_RETURN_IF_ERROR(check_views_on_cuda(manifest_, tensors, device_));
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (shadow_) return shadow_->assign(tensors, version, stream_);
    DC_ASSIGN_OR_RETURN(GpuShadow shadow, GpuShadow::copy_of(manifest_, tensors, version, device_, memory_));
    shadow_.emplace(std::move(shadow));
    // The encoder (its staging is the size of the model) is made with the first full version, so
    // that the first delta does not pay for its allocation.
    return encoder_ ? Status() : set_cuts({});
  }

  Result<EncodedVersion> encode_delta(std::span<const TensorView> current, uint64_t target_version,
                                      const ZstdChoice& choose) override {
    if (!shadow_) return failed_precondition("no version was published yet: the first one is a full one");
    if (!encoder_) DC_RETURN_IF_ERROR(set_cuts({}));
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return encoder_->encode_delta(current, *shadow_, target_version, stream_, choose);
  }

  Status copy_shadow(std::span<const TensorView> host) override {
    if (!shadow_) return failed_precondition("no version was published yet");
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return shadow_->copy_to(host, stream_);
  }

  Result<uint64_t> shadow_hash() override {
    if (!shadow_) return failed_precondition("no version was published yet");
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    // A shadow in pinned host memory is mapped for the device: the kernel reads it over the bus.
    return gpu_model_hash(shadow_->views(), stream_);
  }

  uint64_t version() const override { return shadow_ ? shadow_->version() : 0; }

 private:
  Manifest manifest_;
  CodecOptions options_;
  int device_;
  cudaStream_t stream_;
  ShadowMemory memory_;
  std::optional<GpuShadow> shadow_;
  std::unique_ptr<GpuDeltaEncoder> encoder_;
};

class GpuDeviceApplier final : public DeviceApplier {
 public:
  GpuDeviceApplier(Manifest manifest, std::unique_ptr<GpuApplier> applier, int device, uintptr_t stream)
      : manifest_(std::move(manifest)), applier_(std::move(applier)), device_(device), stream_(as_stream(stream)) {}

  Status apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held_version,
               std::span<const TensorView> targets) override {
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return applier_->apply(buckets, held_version, targets, stream_);
  }

  Status copy_in(std::span<const TensorView> image, std::span<const TensorView> targets) override {
    DC_RETURN_IF_ERROR(check_views_on_cuda(manifest_, targets, device_));
    DC_RETURN_IF_ERROR(manifest_.check_views(image));
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return copy_views(targets, image, stream_);
  }

  Result<uint64_t> model_hash(std::span<const TensorView> tensors) override {
    DC_RETURN_IF_ERROR(check_views_on_cuda(manifest_, tensors, device_));
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return gpu_model_hash(tensors, stream_);
  }

 private:
  Manifest manifest_;
  std::unique_ptr<GpuApplier> applier_;
  int device_;
  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<DeviceEncoder>> make_device_encoder(const Manifest& manifest, const CodecOptions& options,
                                                           int device, uintptr_t stream, bool host_shadow) {
  if (cuda_device_count() <= device) return unavailable("no CUDA device {} (this machine has {})", device, cuda_device_count());
  std::unique_ptr<DeviceEncoder> encoder = std::make_unique<GpuDeviceEncoder>(
      manifest, options, device, stream, host_shadow ? ShadowMemory::kPinnedHost : ShadowMemory::kDevice);
  return encoder;
}

Result<std::unique_ptr<DeviceApplier>> make_device_applier(const Manifest& manifest, int device, uintptr_t stream,
                                                           unsigned host_threads) {
  DC_ASSIGN_OR_RETURN(auto applier, GpuApplier::create(manifest, device, host_threads));
  std::unique_ptr<DeviceApplier> out = std::make_unique<GpuDeviceApplier>(manifest, std::move(applier), device, stream);
  return out;
}

}  // namespace deltacast
