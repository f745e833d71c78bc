#include "sparse/cuda/gpu_applier.h"

#include <chrono>
#include <cstring>

#include "sparse/cuda/chunk_decode_simt.h"
#include "sparse/cuda/simt_device.cuh"
#include "sparse/device_codec.h"
#include "sparse/version_reader.h"

namespace deltacast {

namespace {

constexpr unsigned kDecodeWarps = 4;
constexpr unsigned kDecodeThreads = kDecodeWarps * simt::kWarpSize;
constexpr unsigned kKeptApplyThreads = 256;  // one change per thread: few registers, no shared memory
constexpr uint64_t kDensePieceBytes = 64 << 10;  // dense chunks are split so that many warps copy them
constexpr uint64_t kMaxBlocks = 1u << 20;

unsigned blocks_for(uint64_t items, unsigned per_block) {
  return static_cast<unsigned>(std::min<uint64_t>((items + per_block - 1) / per_block, kMaxBlocks));
}

// Read by lane 0 and shared, so that the lanes of a warp cannot disagree (another warp of the same
// pass may be setting it) and part of a warp go on into collectives alone.
__device__ bool flagged(const simt::DecodeErrorRecord* error) {
  uint32_t code = 0;
  if (threadIdx.x % simt::kWarpSize == 0) code = *reinterpret_cast<const volatile uint32_t*>(&error->code);
  return __shfl_sync(0xffffffffu, code, 0) != simt::kDecodeOk;
}

// The first error of a pass wins; the host names its job.
__device__ void flag(simt::DecodeErrorRecord* error, uint32_t code, uint32_t job) {
  if (atomicCAS(&error->code, 0u, code) == 0u) error->job = job;
}

// Each pass after the walk starts only when the ones before it flagged nothing: the directory of a
// job whose walk failed is incomplete, and the apply pass must write nothing for a bad version.

// One warp per job: the lanes first ask for the body's lines to be brought into L2, then lane 0
// hops from header to header, a chain of dependent loads that then hit the cache.
__global__ void __launch_bounds__(kDecodeThreads)
    walk_jobs(const simt::DecodeJob* jobs, uint32_t count, simt::GroupEntry* directory,
              simt::DecodeErrorRecord* error) {
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  const unsigned lane = threadIdx.x % simt::kWarpSize;
  for (uint32_t j = blockIdx.x * kDecodeWarps + warp; j < count; j += gridDim.x * kDecodeWarps) {
    const simt::DecodeJob& job = jobs[j];
    for (uint64_t at = uint64_t{lane} * 128; at < job.body_bytes; at += simt::kWarpSize * 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(job.body + at));
    }
    if (lane == 0) {
      const uint32_t code = simt::walk_groups(job, j, directory);
      if (code != simt::kDecodeOk) flag(error, code, j);
    }
    __syncwarp();
  }
}

// The groups' decoded changes go to `kept` for apply_kept_version (none where kept.offsets is null).
__global__ void __launch_bounds__(kDecodeThreads)
    check_groups(const simt::DecodeJob* jobs, simt::GroupEntry* directory, uint64_t groups, simt::KeptChanges kept,
                 simt::DecodeErrorRecord* error) {
  __shared__ simt::GroupScratch scratch[kDecodeWarps];
  if (flagged(error)) return;
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  for (uint64_t g = blockIdx.x * kDecodeWarps + warp; g < groups; g += uint64_t{gridDim.x} * kDecodeWarps) {
    simt::GroupEntry& entry = directory[g];
    const uint32_t code =
        simt::warp_check_group(simt::DeviceWarp{}, jobs[entry.job], entry, scratch[warp], g, kept);
    if (code != simt::kDecodeOk && threadIdx.x % simt::kWarpSize == 0) flag(error, code, entry.job);
  }
}

__global__ void __launch_bounds__(kDecodeThreads)
    place_groups(const simt::DecodeJob* jobs, uint32_t count, simt::GroupEntry* directory,
                 simt::DecodeErrorRecord* error) {
  __shared__ simt::GroupScratch scratch[kDecodeWarps];
  if (flagged(error)) return;
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  for (uint32_t j = blockIdx.x * kDecodeWarps + warp; j < count; j += gridDim.x * kDecodeWarps) {
    const uint32_t code = simt::warp_place_groups(simt::DeviceWarp{}, jobs[j], directory, scratch[warp]);
    if (code != simt::kDecodeOk && threadIdx.x % simt::kWarpSize == 0) flag(error, code, j);
  }
}

// Every write of a version in one launch (the groups, then the dense pieces): a launch that
// fails leaves the tensors as they were.
__global__ void __launch_bounds__(kDecodeThreads)
    apply_version(const simt::DecodeJob* jobs, const simt::GroupEntry* directory, uint64_t groups, uint32_t first_piece,
                  uint32_t pieces, simt::DecodeErrorRecord* error) {
  __shared__ simt::GroupScratch scratch[kDecodeWarps];
  if (flagged(error)) return;
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  const uint64_t items = groups + pieces;
  for (uint64_t i = blockIdx.x * kDecodeWarps + warp; i < items; i += uint64_t{gridDim.x} * kDecodeWarps) {
    uint32_t job = 0, code = 0;
    if (i < groups) {
      const simt::GroupEntry& entry = directory[i];
      job = entry.job;
      code = simt::warp_apply_group(simt::DeviceWarp{}, jobs[job], entry, scratch[warp]);
    } else {
      job = first_piece + static_cast<uint32_t>(i - groups);
      code = simt::warp_copy_piece(simt::DeviceWarp{}, jobs[job]);
    }
    if (code != simt::kDecodeOk && threadIdx.x % simt::kWarpSize == 0) flag(error, code, job);
  }
}

// The same writes from the changes the check pass kept: the first `slot_blocks` blocks write one
// change per thread, the rest copy the dense pieces a warp each. One launch, as above.
__global__ void __launch_bounds__(kKeptApplyThreads, 8)
    apply_kept_version(const simt::DecodeJob* jobs, const simt::GroupEntry* directory, simt::KeptChanges kept,
                       uint64_t slots, uint32_t slot_blocks, uint32_t first_piece, uint32_t pieces,
                       simt::DecodeErrorRecord* error) {
  if (flagged(error)) return;
  if (blockIdx.x < slot_blocks) {
    for (uint64_t slot = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; slot < slots;
         slot += uint64_t{slot_blocks} * blockDim.x) {
      const uint32_t code = simt::apply_kept_change(jobs, directory, kept, slot);
      if (code != simt::kDecodeOk) flag(error, code, directory[slot / kPforBlockValues].job);
    }
    return;
  }
  const unsigned warps = blockDim.x / simt::kWarpSize;
  const unsigned warp = threadIdx.x / simt::kWarpSize;
  for (uint64_t p = uint64_t{blockIdx.x - slot_blocks} * warps + warp; p < pieces;
       p += uint64_t{gridDim.x - slot_blocks} * warps) {
    const uint32_t job = first_piece + static_cast<uint32_t>(p);
    const uint32_t code = simt::warp_copy_piece(simt::DeviceWarp{}, jobs[job]);
    if (code != simt::kDecodeOk && threadIdx.x % simt::kWarpSize == 0) flag(error, code, job);
  }
}

}  // namespace

Result<std::unique_ptr<GpuApplier>> GpuApplier::create(Manifest manifest, int device, unsigned host_threads,
                                                       GpuApplyOptions options) {
  if (cuda_device_count() <= device) return unavailable("no CUDA device {}", device);
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<GpuApplier> applier(new GpuApplier(std::move(manifest), device, host_threads, options));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&applier->kernel_start_));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&applier->kernel_stop_));
  DC_RETURN_IF_ERROR(applier->error_.reserve(sizeof(simt::DecodeErrorRecord)));
  DC_RETURN_IF_ERROR(applier->host_error_.reserve(sizeof(simt::DecodeErrorRecord)));
  Result<std::unique_ptr<GpuApplier>> result(std::move(applier));
  return result;
}

GpuApplier::GpuApplier(Manifest manifest, int device, unsigned host_threads, GpuApplyOptions options)
    : manifest_(std::move(manifest)),
      device_(device),
      options_(options),
      pool_(std::make_unique<ThreadPool>(host_threads)) {}

GpuApplier::~GpuApplier() {
  if (kernel_start_) cudaEventDestroy(kernel_start_);
  if (kernel_stop_) cudaEventDestroy(kernel_stop_);
}

bool GpuApplier::keep_changes(std::span<simt::DecodeJob> sparse_jobs, uint64_t groups) {
  const uint64_t limit = options_.kept_changes_limit_bytes;
  if (groups == 0 || limit == 0) return false;
  uint64_t value_bytes = 0;
  for (const simt::DecodeJob& job : sparse_jobs) {
    // (An nnz above the chunk is refused by the walk; here it must not size anything.)
    if (!simt::keepable(job) || job.nnz > job.element_count) return false;
    value_bytes += simt::kept_value_bytes(job.nnz, job.elem_size);
  }
  const uint64_t offset_bytes = groups * kPforBlockValues * sizeof(uint32_t);
  if (offset_bytes > limit || value_bytes > limit - offset_bytes) return false;
  if (kept_offsets_.capacity() < offset_bytes || kept_values_.capacity() < value_bytes) {
    // Both made anew, the old ones given back first, together within the limit: half again as
    // much each where the limit leaves room, so that versions a little larger than any before do
    // not allocate (cudaFree waits for the device).
    kept_offsets_ = DeviceBuffer();
    kept_values_ = DeviceBuffer();
    const uint64_t spare = (limit - offset_bytes - value_bytes) / 2;
    if (!kept_offsets_.reserve(offset_bytes + std::min(offset_bytes / 2, spare)).ok() ||
        !kept_values_.reserve(value_bytes + std::min(value_bytes / 2, spare)).ok()) {
      // Device memory that is not there (another user of the GPU took it): decoded twice, not
      // refused. cudaMalloc left its error as the thread's last, which the next launch check reads.
      (void)cudaGetLastError();
      kept_offsets_ = DeviceBuffer();
      kept_values_ = DeviceBuffer();
      return false;
    }
  }
  uint64_t at = 0;
  for (simt::DecodeJob& job : sparse_jobs) {
    job.kept_values = at;
    at += simt::kept_value_bytes(job.nnz, job.elem_size);
  }
  return true;
}

Status GpuApplier::apply(std::span<const std::span<const uint8_t>> buckets, std::optional<uint64_t> held_version,
                         std::span<const TensorView> targets, cudaStream_t stream) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  DC_RETURN_IF_ERROR(check_views_on_cuda(manifest_, targets, device_));
  // Before any device memory is made: on another current device it would be that device's.
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  DC_ASSIGN_OR_RETURN(VersionChunks version, read_version(manifest_, buckets, held_version, *pool_));
  const auto read = Clock::now();

  // Jobs: one per sparse chunk, then one per 64 KiB of a dense chunk; bodies packed 16-byte aligned.
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
  std::vector<uint32_t> job_chunk;
  std::vector<simt::DecodeJob> jobs;
  uint64_t groups = 0;  // directory entries: the sparse jobs' groups
  const auto target_of = [&](const ChunkHeader& h, uint8_t size) {
    return targets[h.tensor_index].bytes() + h.element_start * size;
  };
  for (size_t c = 0; c < version.chunks.size(); ++c) {
    const ChunkHeader& h = version.chunks[c].header;
    if (h.kind != ChunkKind::kSparse) continue;
    const uint8_t size = static_cast<uint8_t>(dtype_size(manifest_[h.tensor_index].dtype));
    jobs.push_back({bodies_.data() + body_at[c], h.raw_body_bytes, target_of(h, size), h.element_count, h.nnz, groups,
                    size, 0, h.value_codec, 0});
    job_chunk.push_back(static_cast<uint32_t>(c));
    groups += simt::group_count(h.nnz);
  }
  const auto sparse_jobs = static_cast<uint32_t>(jobs.size());
  for (size_t c = 0; c < version.chunks.size(); ++c) {
    const ChunkHeader& h = version.chunks[c].header;
    if (h.kind == ChunkKind::kSparse) continue;
    const uint8_t size = static_cast<uint8_t>(dtype_size(manifest_[h.tensor_index].dtype));
    const uint64_t piece_elements = std::max<uint64_t>(1, kDensePieceBytes / size);
    for (uint64_t e = 0; e < h.element_count; e += piece_elements) {
      const uint64_t n = std::min(piece_elements, h.element_count - e);
      jobs.push_back(
          {bodies_.data() + body_at[c] + e * size, n * size, target_of(h, size) + e * size, n, n, 0, size, 1, 0, 0});
      job_chunk.push_back(static_cast<uint32_t>(c));
    }
  }
  DC_RETURN_IF_ERROR(host_jobs_.grow(jobs.size() * sizeof(simt::DecodeJob)));
  DC_RETURN_IF_ERROR(jobs_.grow(jobs.size() * sizeof(simt::DecodeJob)));
  DC_RETURN_IF_ERROR(directory_.grow(groups * sizeof(simt::GroupEntry)));
  // After what the version cannot do without, so that keeping changes never takes their memory.
  const bool keep = keep_changes(std::span(jobs).first(sparse_jobs), groups);
  const simt::KeptChanges kept{keep ? kept_offsets_.as<uint32_t>() : nullptr, keep ? kept_values_.data() : nullptr};
  std::memcpy(host_jobs_.data(), jobs.data(), jobs.size() * sizeof(simt::DecodeJob));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bodies_.data(), host_bodies_.data(), body_bytes, cudaMemcpyHostToDevice, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(jobs_.data(), host_jobs_.data(), jobs.size() * sizeof(simt::DecodeJob),
                                          cudaMemcpyHostToDevice, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(error_.data(), 0, sizeof(simt::DecodeErrorRecord), stream));
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const auto uploaded = Clock::now();

  // Verify (walk, check, place), then apply (groups and dense pieces): each launch returns at
  // once when one before it flagged an error.
  const auto count = static_cast<uint32_t>(jobs.size());
  const auto* d_jobs = jobs_.as<simt::DecodeJob>();
  auto* d_directory = directory_.as<simt::GroupEntry>();
  auto* d_error = error_.as<simt::DecodeErrorRecord>();
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernel_start_, stream));
  if (sparse_jobs > 0) {
    walk_jobs<<<blocks_for(sparse_jobs, kDecodeWarps), kDecodeThreads, 0, stream>>>(d_jobs, sparse_jobs, d_directory,
                                                                                    d_error);
    // A pass that did not start must not be taken for a clean one.
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    check_groups<<<blocks_for(groups, kDecodeWarps), kDecodeThreads, 0, stream>>>(d_jobs, d_directory, groups, kept,
                                                                                   d_error);
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    place_groups<<<blocks_for(sparse_jobs, kDecodeWarps), kDecodeThreads, 0, stream>>>(d_jobs, sparse_jobs, d_directory,
                                                                                       d_error);
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  const uint32_t pieces = count - sparse_jobs;
  if (count > 0 && keep) {
    const uint64_t slots = groups * kPforBlockValues;
    const unsigned slot_blocks = blocks_for(slots, kKeptApplyThreads);
    const unsigned piece_blocks = blocks_for(pieces, kKeptApplyThreads / simt::kWarpSize);
    apply_kept_version<<<slot_blocks + piece_blocks, kKeptApplyThreads, 0, stream>>>(
        d_jobs, d_directory, kept, slots, slot_blocks, sparse_jobs, pieces, d_error);
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  } else if (count > 0) {
    apply_version<<<blocks_for(groups + pieces, kDecodeWarps), kDecodeThreads, 0, stream>>>(
        d_jobs, d_directory, groups, sparse_jobs, pieces, d_error);
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
  timings_.kept_changes = keep;
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
