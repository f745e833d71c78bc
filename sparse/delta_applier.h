// Consumer side of the codec: verifies every bucket of a version, then
// applies them into the live tensors. Verification decodes everything and
// writes nothing, so a version that fails it leaves the tensors exactly as
// they were; one that passes is applied in a single pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/format.h"

namespace deltacast {

struct VerifiedChunk {
  ChunkHeader header;
  std::span<const uint8_t> raw_body;  // into the caller's bucket, or into VerifiedVersion::decompressed
};

// The result of verify(): refers to the caller's bucket memory, which must
// outlive it.
struct VerifiedVersion {
  uint64_t manifest_hash = 0;
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  bool full = false;
  std::vector<VerifiedChunk> chunks;
  std::vector<std::vector<uint8_t>> decompressed;  // bodies of zstd chunks
};

class DeltaApplier {
 public:
  explicit DeltaApplier(Manifest manifest, unsigned threads = 0);

  const Manifest& manifest() const { return manifest_; }

  // Checks that `buckets` are exactly one version (every index once, same
  // versions and flags), that it applies to `held_version` (nullopt: holding
  // nothing, so only a full sync applies), that chunks do not overlap and a
  // full sync covers every element, and decodes every chunk.
  Result<VerifiedVersion> verify(std::span<const std::span<const uint8_t>> buckets,
                                 std::optional<uint64_t> held_version) const;

  // Writes a verified version into `targets` (host tensors matching the manifest).
  Status apply(const VerifiedVersion& version, std::span<const TensorView> targets) const;

 private:
  Manifest manifest_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace deltacast
