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
#include "sparse/version_reader.h"

namespace deltacast {

class DeltaApplier {
 public:
  explicit DeltaApplier(Manifest manifest, unsigned threads = 0);

  const Manifest& manifest() const { return manifest_; }

  // read_version() (every header, the version set, chunk ranges, zstd), then
  // decodes every sparse body without writing anything. `need`: the reader's
  // layout of the manifest's tensors, for versions selected for it (read_version).
  Result<VersionChunks> verify(std::span<const std::span<const uint8_t>> buckets,
                               std::optional<uint64_t> held_version, const HeldRanges* need = nullptr) const;

  // Writes a version that verify() accepted into `targets` (host tensors matching the manifest).
  Status apply(const VersionChunks& version, std::span<const TensorView> targets) const;

 private:
  Manifest manifest_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace deltacast
