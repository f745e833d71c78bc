#include "sparse/delta_applier.h"

#include "sparse/chunk_decoder.h"

namespace deltacast {

DeltaApplier::DeltaApplier(Manifest manifest, unsigned threads)
    : manifest_(std::move(manifest)), pool_(std::make_unique<ThreadPool>(threads)) {}

Result<VersionChunks> DeltaApplier::verify(std::span<const std::span<const uint8_t>> buckets,
                                           std::optional<uint64_t> held_version, const HeldRanges* need) const {
  DC_ASSIGN_OR_RETURN(VersionChunks version, read_version(manifest_, buckets, held_version, *pool_, need));
  DC_RETURN_IF_ERROR(parallel_for_status(*pool_, version.chunks.size(), [&](size_t i) -> Status {
    const ChunkBody& c = version.chunks[i];
    return verify_chunk_body(c.header, c.raw_body, manifest_[c.header.tensor_index].dtype)
        .with_context(fmt::format("chunk {} (tensor '{}')", i, manifest_[c.header.tensor_index].name));
  }));
  return version;
}

Status DeltaApplier::apply(const VersionChunks& version, std::span<const TensorView> targets) const {
  if (version.manifest_hash != manifest_.hash()) return mismatch("the version was verified for another manifest");
  DC_RETURN_IF_ERROR(manifest_.check_views(targets));
  for (const TensorView& t : targets) {
    if (!t.device.is_cpu()) return invalid_argument("the CPU applier needs host tensors");
  }
  return parallel_for_status(*pool_, version.chunks.size(), [&](size_t i) {
    const ChunkBody& c = version.chunks[i];
    return apply_chunk_body(c.header, c.raw_body, targets[c.header.tensor_index]);
  });
}

}  // namespace deltacast
