// content_hash (core/hash.h) of device memory, computed on the GPU: one
// thread per 64 KiB leaf, then one thread over the leaf digests, with the
// portable XXH3 of core/xxh3_portable.h. Equal to the CPU value bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace deltacast {

struct DeviceRange {
  const void* data;  // device address
  size_t bytes;
};

// Hashes every range (one launch for all leaves of all ranges) and waits for the result.
Status gpu_content_hashes(std::span<const DeviceRange> ranges, std::span<uint64_t> out, cudaStream_t stream = nullptr);

}  // namespace deltacast
