#include "sparse/version_select.h"

#include "sparse/bucket_builder.h"
#include "sparse/bucket_reader.h"

namespace deltacast {

Result<EncodedVersion> select_chunks(const EncodedVersion& version, const Manifest& manifest, const HeldRanges& need,
                                     const CodecOptions& options, ThreadPool& pool) {
  EncodedVersion out;
  out.base_version = version.base_version;
  out.target_version = version.target_version;
  out.full = version.full;
  out.stats.elements = manifest.total_elements();
  out.stats.dense_bytes = manifest.total_bytes();
  std::vector<BucketView> views;
  views.reserve(version.buckets.size());
  for (size_t b = 0; b < version.buckets.size(); ++b) {
    auto view = read_bucket(version.buckets[b], manifest);
    if (!view.ok()) return view.status().with_context(fmt::format("bucket {} of version {}", b, version.target_version));
    views.push_back(std::move(view).value());
  }
  std::vector<std::span<const uint8_t>> kept;
  for (const BucketView& view : views) {
    for (const ChunkRef& c : view.chunks) {
      const ChunkHeader& h = c.header;
      if (!need.intersects(h.tensor_index, h.element_start, h.element_start + h.element_count)) continue;
      // The stored chunk: its header sits right before its body, padding after it.
      kept.emplace_back(c.body.data() - ChunkHeader::kBytes, h.stored_bytes());
      out.stats.changed += h.nnz;
      (h.kind == ChunkKind::kSparse ? out.stats.sparse_chunks : out.stats.dense_chunks) += 1;
    }
  }
  const uint32_t flags = (version.full ? static_cast<uint32_t>(kBucketFull) : 0u) | kBucketSelected;
  out.buckets =
      build_buckets(kept, options.bucket_bytes, BucketStamp{manifest.hash(), version.base_version, version.target_version, flags}, pool);
  for (const auto& bucket : out.buckets) out.stats.wire_bytes += bucket.size();
  return out;
}

}  // namespace deltacast
