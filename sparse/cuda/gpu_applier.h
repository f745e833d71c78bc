// Consumer side of the codec on a GPU: headers, the version set and chunk
// ranges are checked on the host (read_version), the bodies go to the device
// in one transfer, and launches over a device-side job table verify every
// body, then apply them into the device tensors (chunk_decode_simt.h: a
// directory of each sparse chunk's groups of 128 changes lets one warp work
// on each group; dense chunks are copied in 64 KiB pieces). The apply pass
// runs only when verification flagged nothing, so a bad version leaves the
// tensors untouched. Where the device has room, the check pass keeps each
// change it decoded (its position and value) and the apply pass writes them
// one thread per change; otherwise the apply pass decodes every group again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/cuda/device_buffer.h"

namespace deltacast {

namespace simt {
struct DecodeJob;
}

struct GpuApplyTimings {
  double host_seconds = 0;    // read_version: headers, checksums, zstd
  double upload_seconds = 0;  // bodies and job table to the device
  double kernel_seconds = 0;  // verify + apply launches (device events)
  double total_seconds = 0;
  bool kept_changes = false;  // the apply pass wrote the changes the check pass kept
};

struct GpuApplyOptions {
  // Device memory the applier may hold a version's decoded changes in between the check and the
  // apply pass: a slot of 4 bytes and the element's size per change (6 bytes a bf16 change, about
  // four times its share of the body), so the apply pass need not decode every group again. A
  // version that needs more, or a chunk above 2^32 elements, is decoded twice; 0: always twice.
  uint64_t kept_changes_limit_bytes = uint64_t{1} << 30;
};

class GpuApplier {
 public:
  static Result<std::unique_ptr<GpuApplier>> create(Manifest manifest, int device = 0, unsigned host_threads = 0,
                                                    GpuApplyOptions options = {});
  ~GpuApplier();

  // Verifies and applies one version (all its buckets, in host memory) into
  // `targets` (device tensors matching the manifest). `held_version` is what
  // the targets hold now (nullopt: nothing; only a full sync applies).
  Status apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held_version,
               std::span<const TensorView> targets, cudaStream_t stream = nullptr);

  const GpuApplyTimings& last_timings() const { return timings_; }

 private:
  GpuApplier(Manifest manifest, int device, unsigned host_threads, GpuApplyOptions options);
  // Whether this version's changes are kept (GpuApplyOptions; room made for them), and if so where
  // each sparse job's values go.
  bool keep_changes(std::span<simt::DecodeJob> sparse_jobs, uint64_t groups);

  Manifest manifest_;
  int device_;
  GpuApplyOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  PinnedBuffer host_bodies_, host_jobs_, host_error_;
  DeviceBuffer bodies_, jobs_, directory_, error_, kept_offsets_, kept_values_;
  cudaEvent_t kernel_start_ = nullptr;
  cudaEvent_t kernel_stop_ = nullptr;
  GpuApplyTimings timings_;
};

}  // namespace deltacast
