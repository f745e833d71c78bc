#include "sparse/cuda/gpu_encoder.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "sparse/chunk_encoder.h"
#include "sparse/cuda/chunk_encode_simt.h"
#include "sparse/cuda/copy_views.h"
#include "sparse/cuda/simt_device.cuh"
#include "sparse/device_codec.h"

namespace deltacast {

namespace {

// Six blocks per multiprocessor: the register budget that keeps the next tile's loads in registers
// (ptxas, sm_90: 80 registers, no spill for 2-, 4- and 8-byte elements, 8 bytes for 1-byte ones;
// asking for seven, as shared memory would allow, spills 20-32 bytes per thread).
template <typename U>
__global__ void __launch_bounds__(simt::kEncodeThreads, 6) encode_chunks(const simt::EncodeJob* jobs) {
  __shared__ simt::EncodeShared<U> shared;
  simt::encode_chunk<U>(simt::DeviceBlock{}, shared, jobs[blockIdx.x]);
}

// Packs each chunk's output (a multiple of 8 bytes at an 8-aligned region) at its compact offset.
__global__ void compact_chunks(const uint8_t* staging, const uint64_t* region_offset, const uint64_t* sizes,
                               const uint64_t* offsets, uint8_t* out) {
  const uint32_t c = blockIdx.x;
  const uint64_t words = sizes[c] / 8;
  const auto* src = reinterpret_cast<const uint64_t*>(staging + region_offset[c]);
  auto* dst = reinterpret_cast<uint64_t*>(out + offsets[c]);
  for (uint64_t k = threadIdx.x; k < words; k += blockDim.x) dst[k] = src[k];
}

unsigned width_slot(unsigned size) { return size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3; }

}  // namespace

Result<GpuShadow> GpuShadow::copy_of(const Manifest& manifest, std::span<const TensorView> tensors, uint64_t version,
                                     int device, ShadowMemory memory) {
  DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  if (version == 0) return invalid_argument("version 0 means 'nothing held'; versions start at 1");
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  GpuShadow shadow;
  shadow.version_ = version;
  shadow.manifest_hash_ = manifest.hash();
  const bool on_host = memory == ShadowMemory::kPinnedHost;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint8_t* data = nullptr;
    if (on_host) {
      // Pinned host memory is mapped into the device's address space under the same pointer
      // (unified addressing): the encode kernel reads and writes it over PCIe.
      shadow.host_storage_.emplace_back();
      DC_RETURN_IF_ERROR(shadow.host_storage_.back().reserve(tensors[i].nbytes()));
      data = shadow.host_storage_.back().data();
    } else {
      shadow.storage_.emplace_back();
      DC_RETURN_IF_ERROR(shadow.storage_.back().reserve(tensors[i].nbytes()));
      data = shadow.storage_.back().data();
    }
    DC_CUDA_RETURN_IF_ERROR(cudaMemcpy(data, tensors[i].data, tensors[i].nbytes(), cudaMemcpyDefault));
    Device where;  // host memory, mapped for the device
    if (!on_host) where = Device{DeviceKind::kCuda, device};
    shadow.views_.push_back(TensorView{data, tensors[i].dtype, tensors[i].numel, where});
  }
  Result<GpuShadow> result(std::move(shadow));  // an explicit move: nvcc's front end would copy
  return result;
}

Status GpuShadow::assign(std::span<const TensorView> tensors, uint64_t version, cudaStream_t stream) {
  if (version == 0) return invalid_argument("version 0 means 'nothing held'; versions start at 1");
  DC_RETURN_IF_ERROR(copy_views(views_, tensors, stream));
  version_ = version;
  return Status();
}

Status GpuShadow::copy_to(std::span<const TensorView> host, cudaStream_t stream) const {
  return copy_views(host, views_, stream);
}

Result<std::unique_ptr<GpuDeltaEncoder>> GpuDeltaEncoder::create(Manifest manifest, CodecOptions options, int device,
                                                                 std::span<const std::vector<uint64_t>> cuts) {
  DC_ASSIGN_OR_RETURN(DeltaEncoder cpu, DeltaEncoder::create(manifest, options, cuts));
  for (const TensorSpec& t : manifest.tensors()) {
    if (chunk_elements(options, t.dtype) >= (uint64_t{1} << 32)) {
      return invalid_argument("chunk_bytes {} gives chunks of 2^32 or more {} elements; the GPU encoder needs less",
                              options.chunk_bytes, dtype_name(t.dtype));
    }
  }
  if (cuda_device_count() <= device) return unavailable("no CUDA device {}", device);
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<GpuDeltaEncoder> encoder(new GpuDeltaEncoder(std::move(manifest), options, std::move(cpu), device, cuts));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&encoder->kernel_start_));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&encoder->kernel_stop_));
  const size_t n = encoder->ranges_.size();
  DC_RETURN_IF_ERROR(encoder->staging_.reserve(encoder->staging_bytes_));
  DC_RETURN_IF_ERROR(encoder->jobs_.reserve(n * sizeof(simt::EncodeJob)));
  DC_RETURN_IF_ERROR(encoder->sizes_.reserve(n * sizeof(uint64_t)));
  DC_RETURN_IF_ERROR(encoder->changed_.reserve(n * sizeof(uint64_t)));
  DC_RETURN_IF_ERROR(encoder->offsets_.reserve(2 * n * sizeof(uint64_t)));  // region offsets, then compact offsets
  DC_RETURN_IF_ERROR(encoder->host_jobs_.reserve(n * sizeof(simt::EncodeJob)));
  DC_RETURN_IF_ERROR(encoder->host_sizes_.reserve(2 * n * sizeof(uint64_t)));  // sizes, then changed counts
  DC_RETURN_IF_ERROR(encoder->host_offsets_.reserve(2 * n * sizeof(uint64_t)));
  std::memcpy(encoder->host_offsets_.data(), encoder->region_offset_.data(), n * sizeof(uint64_t));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpy(encoder->offsets_.data(), encoder->host_offsets_.data(), n * sizeof(uint64_t),
                                     cudaMemcpyHostToDevice));
  Result<std::unique_ptr<GpuDeltaEncoder>> result(std::move(encoder));
  return result;
}

GpuDeltaEncoder::GpuDeltaEncoder(Manifest manifest, CodecOptions options, DeltaEncoder cpu, int device,
                                 std::span<const std::vector<uint64_t>> cuts)
    : manifest_(std::move(manifest)),
      options_(options),
      cpu_(std::move(cpu)),
      device_(device),
      ranges_(plan_chunk_ranges(manifest_, options_, cuts)),
      pool_(std::make_unique<ThreadPool>(options.threads)) {
  for (const ChunkRange& r : ranges_) {
    region_offset_.push_back(staging_bytes_);
    staging_bytes_ += align_up(ChunkHeader::kBytes + r.element_count * dtype_size(r.dtype), kChunkAlignment);
  }
  order_.resize(ranges_.size());
  for (uint32_t i = 0; i < order_.size(); ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
    return width_slot(dtype_size(ranges_[a].dtype)) < width_slot(dtype_size(ranges_[b].dtype));
  });
  for (unsigned slot = 0; slot <= 4; ++slot) {
    width_first_[slot] = static_cast<uint32_t>(
        std::find_if(order_.begin(), order_.end(),
                     [&](uint32_t i) { return width_slot(dtype_size(ranges_[i].dtype)) >= slot; }) - order_.begin());
  }
}

GpuDeltaEncoder::~GpuDeltaEncoder() {
  if (kernel_start_) cudaEventDestroy(kernel_start_);
  if (kernel_stop_) cudaEventDestroy(kernel_stop_);
}

Status GpuDeltaEncoder::check_device_views(std::span<const TensorView> tensors) const {
  return check_views_on_cuda(manifest_, tensors, device_);
}

Result<EncodedVersion> GpuDeltaEncoder::encode_delta(std::span<const TensorView> current, GpuShadow& shadow,
                                                     uint64_t target_version, cudaStream_t stream,
                                                     const ZstdChoice& choose) {
  const auto start = std::chrono::steady_clock::now();
  DC_RETURN_IF_ERROR(check_device_views(current));
  if (shadow.manifest_hash() != manifest_.hash()) return mismatch("the shadow belongs to another manifest");
  if (target_version <= shadow.version()) {
    return invalid_argument("target version {} is not after the shadow's version {}", target_version, shadow.version());
  }
  DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const size_t n = ranges_.size();
  auto* jobs = host_jobs_.as<simt::EncodeJob>();
  for (size_t k = 0; k < n; ++k) {
    const uint32_t i = order_[k];
    const ChunkRange& r = ranges_[i];
    const uint64_t offset = r.element_start * dtype_size(r.dtype);
    jobs[k] = simt::EncodeJob{current[r.tensor_index].bytes() + offset,
                              shadow.views()[r.tensor_index].bytes() + offset,
                              staging_.data() + region_offset_[i],
                              sizes_.as<uint64_t>() + i,
                              changed_.as<uint64_t>() + i,
                              r.element_start,
                              static_cast<uint32_t>(r.element_count),
                              r.tensor_index,
                              static_cast<uint8_t>(effective_value_codec(options_.value_codec, r.dtype))};
  }
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(jobs_.data(), jobs, n * sizeof(simt::EncodeJob), cudaMemcpyHostToDevice, stream));
  const auto* d_jobs = jobs_.as<simt::EncodeJob>();
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernel_start_, stream));
  const auto launch = [&](unsigned slot, auto kernel) {
    const uint32_t count = width_first_[slot + 1] - width_first_[slot];
    if (count > 0) kernel<<<count, simt::kEncodeThreads, 0, stream>>>(d_jobs + width_first_[slot]);
  };
  launch(0, encode_chunks<uint8_t>);
  launch(1, encode_chunks<uint16_t>);
  launch(2, encode_chunks<uint32_t>);
  launch(3, encode_chunks<uint64_t>);
  DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(kernel_stop_, stream));
  // Sizes to the host, compact offsets back: the one round trip of a version.
  auto* sizes = host_sizes_.as<uint64_t>();
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sizes, sizes_.data(), n * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sizes + n, changed_.data(), n * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  float kernel_ms = 0;
  DC_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&kernel_ms, kernel_start_, kernel_stop_));
  auto* offsets = host_offsets_.as<uint64_t>() + n;
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = total;
    total += sizes[i];
  }
  DC_RETURN_IF_ERROR(compact_.grow(total));
  DC_RETURN_IF_ERROR(host_out_.grow(total));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(offsets_.as<uint64_t>() + n, offsets, n * sizeof(uint64_t),
                                          cudaMemcpyHostToDevice, stream));
  if (n > 0) {
    compact_chunks<<<static_cast<unsigned>(n), 256, 0, stream>>>(staging_.data(), offsets_.as<uint64_t>(),
                                                                 sizes_.as<uint64_t>(), offsets_.as<uint64_t>() + n,
                                                                 compact_.data());
    DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_.data(), compact_.data(), total, cudaMemcpyDeviceToHost, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  EncodedVersion version;
  version.base_version = shadow.version();
  version.target_version = target_version;
  std::vector<std::span<const uint8_t>> chunks(n);
  for (size_t i = 0; i < n; ++i) {
    version.stats.changed += sizes[n + i];
    if (sizes[i] == 0) continue;
    chunks[i] = {host_out_.data() + offsets[i], sizes[i]};
    const bool dense = chunks[i][4] == static_cast<uint8_t>(ChunkKind::kDense);
    version.stats.dense_chunks += dense;
    version.stats.sparse_chunks += !dense;
  }
  const int level = options_.zstd_level != 0 ? options_.zstd_level : choose ? choose(chunks) : 0;
  version.stats.zstd_level = level;
  std::vector<ByteBuffer> compressed;
  if (level != 0) add_zstd_stage(chunks, level, *pool_, compressed);
  finish_version(manifest_, options_, chunks, *pool_, &version);
  shadow.set_version(target_version);
  timings_.kernel_seconds = kernel_ms / 1e3;
  timings_.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return version;
}

Result<EncodedVersion> GpuDeltaEncoder::encode_full(std::span<const TensorView> tensors, uint64_t version,
                                                    cudaStream_t stream) {
  DC_RETURN_IF_ERROR(check_device_views(tensors));
  // A full sync is every byte: the copy to the host is the work, and the CPU encoder packs it the same way.
  std::vector<PinnedBuffer> host;
  host.reserve(tensors.size());
  std::vector<TensorView> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    host.emplace_back();
    DC_RETURN_IF_ERROR(host[i].reserve(tensors[i].nbytes()));
    DC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host[i].data(), tensors[i].data, tensors[i].nbytes(), cudaMemcpyDeviceToHost, stream));
    views.push_back(TensorView{host[i].data(), tensors[i].dtype, tensors[i].numel, Device{}});
  }
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return cpu_.encode_full(views, version);
}

}  // namespace deltacast
