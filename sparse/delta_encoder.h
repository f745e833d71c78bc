// Producer side of the codec: turns the current tensors into the buckets of
// one version, either a delta against the shadow or a full (dense) sync.
// Work is split by chunk across a thread pool; the bytes produced do not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/chunk_encoder.h"
#include "sparse/codec_options.h"
#include "sparse/shadow.h"

namespace deltacast {

struct VersionStats {
  uint64_t elements = 0;     // elements in the manifest
  uint64_t changed = 0;      // elements whose bits changed (delta) or were sent (full)
  uint64_t dense_bytes = 0;  // bytes of the whole model
  uint64_t wire_bytes = 0;   // bytes of all buckets, headers included
  uint64_t sparse_chunks = 0;
  uint64_t dense_chunks = 0;
  int zstd_level = 0;        // the zstd stage's level on its chunks (0: none)

  double density() const { return elements == 0 ? 0.0 : static_cast<double>(changed) / static_cast<double>(elements); }
};

struct EncodedVersion {
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  bool full = false;
  std::vector<std::vector<uint8_t>> buckets;
  VersionStats stats;
};

// Groups encoded chunks into the buckets of `version` and fills its byte statistics.
void finish_version(const Manifest& manifest, const CodecOptions& options, std::span<const std::span<const uint8_t>> chunks,
                    ThreadPool& pool, EncodedVersion* version);

// The zstd stage at `level` on chunks encoded without it, each as compress_chunk makes it: the
// compressed chunks go into `storage`, and `chunks` point there (empty ones stay empty).
void add_zstd_stage(std::vector<std::span<const uint8_t>>& chunks, int level, ThreadPool& pool,
                    std::vector<ByteBuffer>& storage);

// Cuts every tensor of the manifest into chunk ranges of chunk_elements();
// empty tensors get none. Both encoders (CPU and GPU) use this cut.
// `cuts[t]`, where given: element offsets of tensor t where a chunk must end (the edges of what
// the receivers of a resharded version hold, core/layout.h), so that every chunk is wholly needed
// or not at all by each of them; chunk_elements() counts again from each cut.
std::vector<ChunkRange> plan_chunk_ranges(const Manifest& manifest, const CodecOptions& options,
                                          std::span<const std::vector<uint64_t>> cuts = {});

// Picks the zstd level for a version once its chunks are encoded without the zstd stage (0:
// none): the producer's choice for a slow WAN (broadcast/engine/wan_compression.h).
using ZstdChoice = std::function<int(std::span<const std::span<const uint8_t>> chunks)>;

class DeltaEncoder {
 public:
  // `cuts`: see plan_chunk_ranges (none: chunks of chunk_elements() from each tensor's start).
  static Result<DeltaEncoder> create(Manifest manifest, CodecOptions options,
                                     std::span<const std::vector<uint64_t>> cuts = {});

  const Manifest& manifest() const { return manifest_; }
  const CodecOptions& options() const { return options_; }

  // Diffs `current` against `shadow` (updating it) and encodes the delta from
  // shadow.version() to `target_version`.
  // Where the options have no zstd stage, `choose` (when given) may add one to this version.
  Result<EncodedVersion> encode_delta(std::span<const TensorView> current, Shadow& shadow, uint64_t target_version,
                                      const ZstdChoice& choose = {});

  // Encodes every element densely as version `version` (for a consumer that
  // holds nothing, or the wrong base).
  Result<EncodedVersion> encode_full(std::span<const TensorView> tensors, uint64_t version);

 private:
  DeltaEncoder(Manifest manifest, CodecOptions options, std::vector<ChunkRange> ranges);
  Status check_host_views(std::span<const TensorView> tensors) const;
  void finish(EncodedVersion* version, std::span<const ByteBuffer> chunks);


  Manifest manifest_;
  CodecOptions options_;
  std::vector<ChunkRange> ranges_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace deltacast
