// Host-side reading of one version's buckets: every bucket and chunk header,
// the version set (all buckets once, same versions), the version against
// what the consumer holds, chunk ranges (no overlap; a full sync covers
// everything), and zstd decompression. Sparse bodies are located but not
// decoded: the CPU applier decodes them on the host, the GPU applier on the
// device.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/held_ranges.h"
#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/format.h"

namespace deltacast {

struct ChunkBody {
  ChunkHeader header;
  std::span<const uint8_t> raw_body;  // into the caller's bucket, or into VersionChunks::decompressed
};

// Refers to the caller's bucket memory, which must outlive it.
struct VersionChunks {
  uint64_t manifest_hash = 0;
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  bool full = false;
  std::vector<ChunkBody> chunks;                   // in bucket order, then payload order
  std::vector<std::vector<uint8_t>> decompressed;  // bodies of zstd chunks
};

// `held_version` is what the consumer holds (nullopt: nothing, so only a full sync applies).
// `need`: what the reader holds of the manifest's tensors (core/held_ranges.h), for
// versions selected for it (sparse/version_select.h): a selected full sync must cover exactly
// that; a selected version read without it is refused.
Result<VersionChunks> read_version(const Manifest& manifest, std::span<const std::span<const uint8_t>> buckets,
                                   std::optional<uint64_t> held_version, ThreadPool& pool,
                                   const HeldRanges* need = nullptr);

}  // namespace deltacast
