#include "sparse/cuda/gpu_hash.h"

#include <vector>

#include "core/hash.h"
#include "core/xxh3_portable.h"
#include "sparse/cuda/device_buffer.h"

namespace deltacast {

namespace {

struct LeafJob {
  const uint8_t* data;
  uint64_t bytes;
};

__global__ void hash_leaves(const LeafJob* leaves, uint64_t count, uint64_t* digests) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    digests[i] = xxh3::hash64(leaves[i].data, leaves[i].bytes, 0);
  }
}

// One thread per range: XXH3 of the range's digests, seeded with its length.
__global__ void hash_digests(const uint64_t* digests, const uint64_t* first_leaf, const uint64_t* leaf_count,
                             const uint64_t* lengths, uint64_t ranges, uint64_t* out) {
  for (uint64_t r = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; r < ranges;
       r += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    out[r] = xxh3::hash64(digests + first_leaf[r], leaf_count[r] * sizeof(uint64_t), lengths[r]);
  }
}

}  // namespace

Status gpu_content_hashes(std::span<const DeviceRange> ranges, std::span<uint64_t> out, cudaStream_t stream) {
  if (out.size() != ranges.size()) return invalid_argument("{} ranges but room for {} hashes", ranges.size(), out.size());
  if (ranges.empty()) return Status();
  std::vector<LeafJob> leaves;
  std::vector<uint64_t> meta(3 * ranges.size());  // first leaf, leaf count, length per range
  for (size_t r = 0; r < ranges.size(); ++r) {
    const auto* p = static_cast<const uint8_t*>(ranges[r].data);
    const size_t count = content_hash_leaf_count(ranges[r].bytes);
    meta[r] = leaves.size();
    meta[ranges.size() + r] = count;
    meta[2 * ranges.size() + r] = ranges[r].bytes;
    for (size_t i = 0; i < count; ++i) {
      const size_t off = i * kHashLeafBytes;
      leaves.push_back({p + off, std::min<uint64_t>(kHashLeafBytes, ranges[r].bytes - off)});
    }
  }
  DeviceBuffer d_leaves, d_digests, d_meta, d_out;
  DC_RETURN_IF_ERROR(d_leaves.reserve(leaves.size() * sizeof(LeafJob)));
  DC_RETURN_IF_ERROR(d_digests.reserve(leaves.size() * sizeof(uint64_t)));
  DC_RETURN_IF_ERROR(d_meta.reserve(meta.size() * sizeof(uint64_t)));
  DC_RETURN_IF_ERROR(d_out.reserve(out.size() * sizeof(uint64_t)));
  DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_leaves.data(), leaves.data(), leaves.size() * sizeof(LeafJob),
                                          cudaMemcpyHostToDevice, stream));
  DC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_meta.data(), meta.data(), meta.size() * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
  const unsigned threads = 256;
  const auto blocks_for = [&](uint64_t n) { return static_cast<unsigned>(std::min<uint64_t>((n + threads - 1) / threads, 65535)); };
  hash_leaves<<<blocks_for(leaves.size()), threads, 0, stream>>>(d_leaves.as<LeafJob>(), leaves.size(),
                                                                 d_digests.as<uint64_t>());
  DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const uint64_t* m = d_meta.as<uint64_t>();
  hash_digests<<<blocks_for(ranges.size()), threads, 0, stream>>>(d_digests.as<uint64_t>(), m, m + ranges.size(),
                                                                  m + 2 * ranges.size(), ranges.size(),
                                                                  d_out.as<uint64_t>());
  DC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  DC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out.data(), d_out.data(), out.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
  return cuda_status(cudaStreamSynchronize(stream), "hash stream");
}

}  // namespace deltacast
