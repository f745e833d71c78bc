// The codec on tensors in GPU memory, as the engine sees it: interfaces with no CUDA types in
// them, so that the engine compiles the same with or without the CUDA kernels. A build with the
// kernels (DELTACAST_CUDA) implements them in sparse/cuda/device_codec.cc over GpuDeltaEncoder
// and GpuApplier; a build without answers every request with an error saying so
// (device_codec_absent.cc). Streams are raw cudaStream_t handles as integers (0: the default
// stream).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/manifest.h"
#include "core/tensor_view.h"
#include "sparse/delta_encoder.h"

namespace deltacast {

// Whether this build has the CUDA kernels (it may still find no GPU at run time).
bool device_codec_built();

// Checks that `tensors` all live on one CUDA device and returns its index; the error names the
// first tensor (`manifest`'s name for it) that is elsewhere. Host tensors only: nullopt.
Result<std::optional<int>> cuda_device_of(const Manifest& manifest, std::span<const TensorView> tensors);

// Checks `tensors` against the manifest and that every one is on CUDA device `device`; the error
// names the first that is not.
Status check_views_on_cuda(const Manifest& manifest, std::span<const TensorView> tensors, int device);

// The producer's side: the last published version (the shadow) in GPU memory, diffed and encoded
// on the GPU; only the encoded buckets cross to the host.
class DeviceEncoder {
 public:
  virtual ~DeviceEncoder() = default;
  // The shadow takes `tensors` (device tensors matching the manifest) as `version`: a full version.
  virtual Status assign(std::span<const TensorView> tensors, uint64_t version) = 0;
  // Diffs `current` against the shadow (updated in place) and encodes the delta from the
  // shadow's version to `target_version`, byte for byte what DeltaEncoder makes.
  // `choose`: as DeltaEncoder::encode_delta's.
  virtual Result<EncodedVersion> encode_delta(std::span<const TensorView> current, uint64_t target_version,
                                              const ZstdChoice& choose = {}) = 0;
  // Chunks are cut at these element offsets too (plan_chunk_ranges); the shadow is kept.
  virtual Status set_cuts(std::span<const std::vector<uint64_t>> cuts) = 0;
  // Copies the shadow into host memory laid out as `host` (views matching the manifest).
  virtual Status copy_shadow(std::span<const TensorView> host) = 0;
  // model_hash (core/hash.h) of the shadow, computed where it lives: no copy to the host.
  virtual Result<uint64_t> shadow_hash() = 0;
  virtual uint64_t version() const = 0;
};

// `host_shadow`: the shadow lives in pinned host memory, read and written by the diff over PCIe
// (no HBM for it; slower: the diff reads the whole model across the bus), not in GPU memory.
Result<std::unique_ptr<DeviceEncoder>> make_device_encoder(const Manifest& manifest, const CodecOptions& options,
                                                           int device, uintptr_t stream, bool host_shadow = false);

// The consumer's side: versions verified and applied on the GPU, in place, on one stream. Each
// call returns once its work completed on the device, so that anything the caller queues on the
// stream afterwards sees the version whole.
class DeviceApplier {
 public:
  virtual ~DeviceApplier() = default;
  // Verifies every bucket on the device, then applies them into `targets`; nothing is written
  // unless the whole version verifies. `held_version`: what the targets hold (nullopt: nothing).
  virtual Status apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held_version,
                       std::span<const TensorView> targets) = 0;
  // Copies a full version's tensors from host memory (`image`, views matching the manifest).
  virtual Status copy_in(std::span<const TensorView> image, std::span<const TensorView> targets) = 0;
  // model_hash (core/hash.h) of device tensors, computed on the GPU.
  virtual Result<uint64_t> model_hash(std::span<const TensorView> tensors) = 0;
};

Result<std::unique_ptr<DeviceApplier>> make_device_applier(const Manifest& manifest, int device, uintptr_t stream,
                                                           unsigned host_threads);

}  // namespace deltacast
