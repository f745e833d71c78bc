// Groups encoded chunks, in order, into buckets of at most `bucket_bytes`
// payload (a chunk larger than that travels alone) and stamps each bucket's
// header: versions, index/count, payload checksum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "sparse/format.h"

namespace deltacast {

struct BucketStamp {
  uint64_t manifest_hash = 0;
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  uint32_t flags = 0;
};

// Each element of `chunks` is one encoded chunk, or empty for a range that
// had nothing to send. Always returns at least one bucket, so that even a version with
// no changes is announced and committed.
std::vector<std::vector<uint8_t>> build_buckets(std::span<const std::span<const uint8_t>> chunks, uint64_t bucket_bytes,
                                                const BucketStamp& stamp, ThreadPool& pool);

}  // namespace deltacast
