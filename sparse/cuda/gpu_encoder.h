// Producer side of the codec on a GPU: the diff against a device-resident
// shadow and the encoding run in one pass on the device (one thread block
// per chunk), chunks are compacted on the device and copied to pinned host
// memory in one transfer, then grouped into buckets exactly as the CPU
// encoder does. The buckets are byte-identical to DeltaEncoder's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/cuda/device_buffer.h"
#include "sparse/delta_encoder.h"

namespace deltacast {

// Where a GpuShadow keeps its bytes: device memory (the fastest diff), or pinned host memory
// that the diff kernel reads and writes over PCIe, for trainers that cannot spare the HBM.
enum class ShadowMemory { kDevice, kPinnedHost };

// The producer's last published version, for the GPU encoder.
class GpuShadow {
 public:
  // Copies `tensors` (device or host memory) as version `version`.
  static Result<GpuShadow> copy_of(const Manifest& manifest, std::span<const TensorView> tensors, uint64_t version,
                                   int device = 0, ShadowMemory memory = ShadowMemory::kDevice);

  // Overwrites the copy with `tensors` (same manifest, device or host memory) as `version`, on
  // `stream`, and waits for it.
  Status assign(std::span<const TensorView> tensors, uint64_t version, cudaStream_t stream = nullptr);
  // Copies the shadow into `host` (host views of the same tensors) on `stream`, and waits for it.
  Status copy_to(std::span<const TensorView> host, cudaStream_t stream = nullptr) const;

  uint64_t version() const { return version_; }
  void set_version(uint64_t version) { version_ = version; }
  uint64_t manifest_hash() const { return manifest_hash_; }
  std::span<const TensorView> views() const { return views_; }

 private:
  std::vector<DeviceBuffer> storage_;
  std::vector<PinnedBuffer> host_storage_;  // ShadowMemory::kPinnedHost
  std::vector<TensorView> views_;
  uint64_t version_ = 0;
  uint64_t manifest_hash_ = 0;
};

struct GpuEncodeTimings {
  double kernel_seconds = 0;  // diff + encode kernels (device events)
  double total_seconds = 0;   // the whole call: kernels, compaction, transfer, buckets
};

class GpuDeltaEncoder {
 public:
  // Chunks must stay below 2^32 elements (options.chunk_bytes). `cuts`: see plan_chunk_ranges.
  static Result<std::unique_ptr<GpuDeltaEncoder>> create(Manifest manifest, CodecOptions options, int device = 0,
                                                         std::span<const std::vector<uint64_t>> cuts = {});
  ~GpuDeltaEncoder();

  const Manifest& manifest() const { return manifest_; }

  // Diffs device tensors `current` against `shadow` (updated in place) and
  // encodes the delta from shadow.version() to `target_version`.
  // `choose`: as DeltaEncoder::encode_delta's.
  Result<EncodedVersion> encode_delta(std::span<const TensorView> current, GpuShadow& shadow, uint64_t target_version,
                                      cudaStream_t stream = nullptr, const ZstdChoice& choose = {});

  // A full (dense) sync of device tensors as version `version`.
  Result<EncodedVersion> encode_full(std::span<const TensorView> tensors, uint64_t version, cudaStream_t stream = nullptr);

  const GpuEncodeTimings& last_timings() const { return timings_; }

 private:
  GpuDeltaEncoder(Manifest manifest, CodecOptions options, DeltaEncoder cpu, int device,
                  std::span<const std::vector<uint64_t>> cuts);
  Status check_device_views(std::span<const TensorView> tensors) const;

  Manifest manifest_;
  CodecOptions options_;
  DeltaEncoder cpu_;  // full syncs and the zstd stage reuse the CPU encoder
  int device_;
  std::vector<ChunkRange> ranges_;
  std::vector<uint64_t> region_offset_;  // where each chunk's output region starts in staging
  uint64_t staging_bytes_ = 0;
  std::vector<uint32_t> order_;          // ranges grouped by element width (one launch per width)
  uint32_t width_first_[5] = {};         // order_ index where each width's ranges start: 1, 2, 4, 8 bytes, end
  DeviceBuffer staging_, compact_, jobs_, sizes_, changed_, offsets_;
  PinnedBuffer host_jobs_, host_sizes_, host_offsets_, host_out_;
  std::unique_ptr<ThreadPool> pool_;
  cudaEvent_t kernel_start_ = nullptr;
  cudaEvent_t kernel_stop_ = nullptr;
  GpuEncodeTimings timings_;
};

}  // namespace deltacast
