#include "sparse/cuda/gpu_applier.h"

#include <chrono>
#include <cstring>

#include "sparse/cuda/chunk_decode_simt.h"
#include "sparse/cuda/simt_device.cuh"
#include "sparse/version_reader.h"

namespace deltacast {

namespace {

constexpr unsigned kDecodeWarps = 4;
constexpr uint64_t kDensePieceBytes = 64 << 10;  // dense chunks are split so that many warps copy them

template <bool kApply>
__global__ void __launch_bounds__(kDecodeWarps * simt::kWarpSize)
    decode_jobs(const simt::DecodeJob* jobs, uint32_t count, simt::DecodeErrorRecord* error) {
  __shared__ simt::DecodeWarpScratch scratch[kDecodeWarps];
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  const uint32_t stride = gridDim.x * kDecodeWarps;
  for (uint32_t j = blockIdx.x * kDecodeWarps + warp; j < count; j += stride) {
    // The apply pass writes nothing once anything was flagged (by the verify pass before it).
    if (kApply && *reinterpret_cast<volatile uint32_t*>(&error->code) != simt::kDecodeOk) return;
    const uint32_t code = simt::warp_decode_job<kApply>(simt::DeviceWarp{}, jobs[j], scratch[warp]);
    if (code != simt::kDecodeOk && threadIdx.x % simt::kWarpSize == 0) {
      if (atomicCAS(&error->code, 0u, code) == 0u) error->job = j;
    }
  }
}

}  // namespace

Result<std::unique_ptr<GpuApplier>> GpuApplier::create(Manifest manifest, int device, unsigned host_threads) {
  if (cuda_device_count() <= device) return unavailable("no CUDA device {}", device);
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<GpuApplier> applier(new GpuApplier(std::move(manifest), device, host_threads));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&applier->kernel_start_));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&applier->kernel_stop_));
  DC_RETURN_IF_ERROR(applier->error_.reserve(sizeof(simt::DecodeErrorRecord)));
  DC_RETURN_IF_ERROR(applier->host_error_.reserve(sizeof(simt::DecodeErrorRecord)));
  Result<std::unique_ptr<GpuApplier>> result(std::move(applier));
  return result;
}

GpuApplier::GpuApplier(Manifest manifest, int device, unsigned host_threads)
    : manifest_(std::move(manifest)), device_(device), pool_(std::make_unique<ThreadPool>(host_threads)) {}

GpuApplier::~GpuApplier() {
  if (kernel_start_) cudaEventDestroy(kernel_start_);
  if (kernel_stop_) cudaEventDestroy(kernel_stop_);
}

Status GpuApplier::apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held_version,
                         std::span<const TensorView> targets, cudaStream_t stream) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  DC_RETURN_IF_ERROR(manifest_.check_views(targets));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].device != Device{DeviceKind::kCuda, device_}) {
      return invalid_argument("tensor '{}' is not on CUDA device {}", manifest_[i].name, device_);
    }
  }
  DC_ASSIGN_OR_RETURN(VersionChunks version, read_version(manifest_, buckets, held_version, *pool_));
  const auto read = Clock::now();

  // Jobs: one per sparse chunk, one per 64 KiB of a dense chunk; bodies packed 16-byte aligned.
  std::vector<uint32_t> job_chunk;
  std::vector<simt::DecodeJob> jobs;
  std::vector<uint64_t> body_at(version.chunks.size());
  uint64_t body_bytes = 0;
  for (size_t c = 0; c < version.chunks.size(); ++c) {
    body_at[c] = body_bytes;
    body_bytes += align_up(version.chunks[c].raw_body.size(), 16);
  }
  DC_RETURN_IF_ERROR(host_bodies_.grow(body_bytes));
  DC_RETURN_IF_ERROR(bodies_.grow(body_bytes));
  pool_->parallel_for(version.chunks.size(), [&](size_t c) {
    std::memcpy(host_bodies_.data() + body_at[c], version.chunks[c].raw_body.data(), version.chunks[c].raw_body.size());
  });
  for (size_t c = 0; c < version.chunks.size(); ++c) {
    const ChunkHeader& h = version.chunks[c].header;
    const uint8_t size = static_cast<uint8_t>(dtype_size(manifest_[h.tensor_index].dtype));
    uint8_t* target = targets[h.tensor_index].bytes() + h.element_start * size;
    const uint8_t* body = bodies_.data() + body_at[c];
    if (h.kind == ChunkKind::kSparse) {
      jobs.push_back({body, h.raw_body_bytes, target, h.element_count, h.nnz, size, 0, h.value_codec});
      job_chunk.push_back(static_cast<uint32_t>(c));
      continue;
    }
    const uint64_t piece_elements = std::max<uint64_t>(1, kDensePieceBytes / size);
    for (uint64_t e = 0; e < h.element_count; e += piece_elements) {
      const uint64_t n = std::min(piece_elements, h.element_count - e);
      jobs.push_back({body + e * size, n * size, target + e * size, n, n, size, 1, 0});
      job_chunk.push_back(static_cast<uint32_t>(c));
    }
  }
  DC_RETURN_IF_ERROR(host_jobs_.grow(jobs.size() * sizeof(simt::DecodeJob)));
  DC_RETURN_IF_ERROR(jobs_.grow(jobs.size() * sizeof(simt::DecodeJob)));
  std::memcpy(host_jobs_.data(), jobs.data(), jobs.size() * sizeof(simt::DecodeJob));
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bodies_.data(), host_bodies_.data(), body_bytes, cudaMemcpyHostToDevice, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(jobs_.data(), host_jobs_.data(), jobs.size() * sizeof(simt::DecodeJob),
                                          cudaMemcpyHostToDevice, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(error_.data(), 0, sizeof(simt::DecodeErrorRecord), stream));
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const auto uploaded = Clock::now();

  const uint32_t count = static_cast<uint32_t>(jobs.size());
  const unsigned blocks = static_cast<unsigned>(std::min<uint64_t>((count + kDecodeWarps - 1) / kDecodeWarps, 1u << 16));
  const auto* d_jobs = jobs_.as<simt::DecodeJob>();
  auto* d_error = error_.as<simt::DecodeErrorRecord>();
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernel_start_, stream));
  if (count > 0) {
    decode_jobs<false><<<blocks, kDecodeWarps * simt::kWarpSize, 0, stream>>>(d_jobs, count, d_error);
    decode_jobs<true><<<blocks, kDecodeWarps * simt::kWarpSize, 0, stream>>>(d_jobs, count, d_error);
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernel_stop_, stream));
  auto* error = host_error_.as<simt::DecodeErrorRecord>();
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(error, d_error, sizeof(*error), cudaMemcpyDeviceToHost, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  float kernel_ms = 0;
  DC_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&kernel_ms, kernel_start_, kernel_stop_));
  timings_.host_seconds = std::chrono::duration<double>(read - start).count();
  timings_.upload_seconds = std::chrono::duration<double>(uploaded - read).count();
  timings_.kernel_seconds = kernel_ms / 1e3;
  timings_.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (error->code != simt::kDecodeOk) {
    const uint32_t c = error->job < job_chunk.size() ? job_chunk[error->job] : 0;
    const ChunkHeader& h = version.chunks[c].header;
    return corrupt("chunk {} (tensor '{}'): {} (found on the device; nothing was written)", c,
                   manifest_[h.tensor_index].name, simt::decode_error_name(error->code));
  }
  return Status();
}

}  // namespace deltacast
