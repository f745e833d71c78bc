// A version travels as one blob: a small index (u32 magic "DCVB", u32 bucket
// count, u64 size per bucket) followed by the buckets back to back. Consumers
// split it back after checking its content hash (announced by the
// coordinator), then verify every bucket as usual.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/status.h"

namespace deltacast {

class ThreadPool;

inline constexpr uint32_t kBlobMagic = 0x42564344;  // "DCVB"

uint64_t blob_bytes(const std::vector<std::vector<uint8_t>>& buckets);
// Writes the blob into `out` (blob_bytes(buckets) long), copying buckets in parallel on `pool` if given.
void pack_blob_into(const std::vector<std::vector<uint8_t>>& buckets, uint8_t* out, ThreadPool* pool = nullptr);
AlignedBuffer pack_blob(const std::vector<std::vector<uint8_t>>& buckets);
// Spans over the buckets inside an untrusted blob.
Result<std::vector<std::span<const uint8_t>>> unpack_blob(std::span<const uint8_t> blob);

}  // namespace deltacast
