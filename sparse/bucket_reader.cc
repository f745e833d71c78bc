#include "sparse/bucket_reader.h"

#include "core/hash.h"
#include "sparse/chunk_decoder.h"

namespace deltacast {

namespace {

Result<BucketView> read_bucket_unlabelled(std::span<const uint8_t> bucket, const Manifest& manifest) {
  DC_ASSIGN_OR_RETURN(BucketHeader header, BucketHeader::parse(bucket));
  if (header.manifest_hash != manifest.hash()) {
    return mismatch("bucket is for manifest {:016x}, this side has {:016x}", header.manifest_hash, manifest.hash());
  }
  const std::span<const uint8_t> payload = bucket.subspan(BucketHeader::kBytes);
  if (payload.size() != header.payload_bytes) {
    return corrupt("bucket payload is {} bytes, header says {}", payload.size(), header.payload_bytes);
  }
  if (content_hash(payload.data(), payload.size()) != header.payload_checksum) {
    return corrupt("bucket payload checksum mismatch");
  }
  BucketView view{header, {}};
  view.chunks.reserve(header.chunk_count);
  size_t at = 0;
  for (uint32_t i = 0; i < header.chunk_count; ++i) {
    auto parsed = ChunkHeader::parse(payload.subspan(at));
    if (!parsed.ok()) return parsed.status().with_context(fmt::format("chunk {}", i));
    const ChunkHeader& h = *parsed;
    DC_RETURN_IF_ERROR(check_chunk_header(h, manifest).with_context(fmt::format("chunk {}", i)));
    const size_t body_at = at + ChunkHeader::kBytes;
    if (h.body_bytes > payload.size() - body_at) {
      return corrupt("chunk {} body of {} bytes runs past the payload end", i, h.body_bytes);
    }
    const size_t end = body_at + h.body_bytes;
    const size_t padded = align_up(end, kChunkAlignment);
    if (padded > payload.size()) return corrupt("chunk {} padding runs past the payload end", i);
    for (size_t k = end; k < padded; ++k) {
      if (payload[k] != 0) return corrupt("chunk {} padding byte is not zero", i);
    }
    view.chunks.push_back(ChunkRef{h, payload.subspan(body_at, h.body_bytes)});
    at = padded;
  }
  if (at != payload.size()) return corrupt("{} bytes after the last chunk", payload.size() - at);
  return view;
}

}  // namespace

Result<BucketView> read_bucket(std::span<const uint8_t> bucket, const Manifest& manifest) {
  auto view = read_bucket_unlabelled(bucket, manifest);
  if (!view.ok() && bucket.size() >= BucketHeader::kBytes) {
    // Name the bucket when its header is readable enough to say which one it claims to be.
    auto header = BucketHeader::parse(bucket);
    if (header.ok()) {
      return view.status().with_context(fmt::format("bucket {}/{} of version {}", header->bucket_index,
                                                    header->bucket_count, header->target_version));
    }
  }
  return view;
}

}  // namespace deltacast
