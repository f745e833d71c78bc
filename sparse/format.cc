#include "sparse/format.h"

#include "core/byte_io.h"
#include "core/hash.h"

namespace deltacast {

Result<ChunkHeader> ChunkHeader::parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < kBytes) return corrupt("chunk header truncated: {} of {} bytes", bytes.size(), kBytes);
  const uint8_t* p = bytes.data();
  if (p[4] > static_cast<uint8_t>(ChunkKind::kSparse)) return corrupt("chunk kind {} is unknown", p[4]);
  if (p[5] > 1) return corrupt("chunk value codec {} is unknown", p[5]);
  if (p[6] > static_cast<uint8_t>(Compression::kZstd)) return corrupt("chunk compression {} is unknown", p[6]);
  if (p[7] != 0) return corrupt("chunk reserved byte is {} (must be 0)", p[7]);
  if (load_le<uint64_t>(p + 32) != 0) return corrupt("chunk reserved field is not 0");
  ChunkHeader h;
  h.tensor_index = load_le<uint32_t>(p + 0);
  h.kind = static_cast<ChunkKind>(p[4]);
  h.value_codec = p[5];
  h.compression = static_cast<Compression>(p[6]);
  h.element_start = load_le<uint64_t>(p + 8);
  h.element_count = load_le<uint64_t>(p + 16);
  h.nnz = load_le<uint64_t>(p + 24);
  h.raw_body_bytes = load_le<uint64_t>(p + 40);
  h.body_bytes = load_le<uint64_t>(p + 48);
  return h;
}

void BucketHeader::write(uint8_t* out) const {
  store_le<uint32_t>(out + 0, kBucketMagic);
  store_le<uint16_t>(out + 4, kFormatVersion);
  store_le<uint16_t>(out + 6, static_cast<uint16_t>(kBytes));
  store_le<uint64_t>(out + 8, manifest_hash);
  store_le<uint64_t>(out + 16, base_version);
  store_le<uint64_t>(out + 24, target_version);
  store_le<uint32_t>(out + 32, bucket_index);
  store_le<uint32_t>(out + 36, bucket_count);
  store_le<uint32_t>(out + 40, chunk_count);
  store_le<uint32_t>(out + 44, flags);
  store_le<uint64_t>(out + 48, payload_bytes);
  store_le<uint64_t>(out + 56, payload_checksum);
  store_le<uint64_t>(out + 64, xxh3_64(out, 64));
}

Result<BucketHeader> BucketHeader::parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < kBytes) return corrupt("bucket header truncated: {} of {} bytes", bytes.size(), kBytes);
  const uint8_t* p = bytes.data();
  const uint32_t magic = load_le<uint32_t>(p);
  if (magic != kBucketMagic) return corrupt("not a deltacast bucket (magic {:#010x})", magic);
  const uint16_t version = load_le<uint16_t>(p + 4);
  if (version != kFormatVersion)
    return corrupt("bucket format version {} is not supported (this build reads {})", version, kFormatVersion);
  const uint16_t header_bytes = load_le<uint16_t>(p + 6);
  if (header_bytes != kBytes) return corrupt("bucket header size {} is not {}", header_bytes, kBytes);
  const uint64_t stored_checksum = load_le<uint64_t>(p + 64);
  if (xxh3_64(p, 64) != stored_checksum) return corrupt("bucket header checksum mismatch");
  BucketHeader h;
  h.manifest_hash = load_le<uint64_t>(p + 8);
  h.base_version = load_le<uint64_t>(p + 16);
  h.target_version = load_le<uint64_t>(p + 24);
  h.bucket_index = load_le<uint32_t>(p + 32);
  h.bucket_count = load_le<uint32_t>(p + 36);
  h.chunk_count = load_le<uint32_t>(p + 40);
  h.flags = load_le<uint32_t>(p + 44);
  h.payload_bytes = load_le<uint64_t>(p + 48);
  h.payload_checksum = load_le<uint64_t>(p + 56);
  if (h.flags & ~kKnownBucketFlags) return corrupt("bucket has unknown flags {:#x}", h.flags);
  if (h.bucket_count == 0 || h.bucket_index >= h.bucket_count) {
    return corrupt("bucket index {} of {} is impossible", h.bucket_index, h.bucket_count);
  }
  if (h.full() ? (h.base_version != 0 || h.target_version == 0)
               : (h.base_version == 0 || h.target_version <= h.base_version)) {
    return corrupt("bucket versions base {} -> target {} are inconsistent ({} sync)", h.base_version, h.target_version,
                   h.full() ? "full" : "delta");
  }
  if (h.chunk_count > h.payload_bytes / ChunkHeader::kBytes) {
    return corrupt("bucket claims {} chunks in a {}-byte payload", h.chunk_count, h.payload_bytes);
  }
  return h;
}

}  // namespace deltacast
