// Byte layout of chunks and buckets (format version 1). sparse/FORMAT.md is
// the normative description; this file is its code form. Parsing here is
// syntactic (sizes, magic, known enum values); what a header means for a
// given manifest and consumer is checked by the chunk and bucket readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/host_device.h"
#include "core/status.h"

namespace deltacast {

inline constexpr uint16_t kFormatVersion = 1;

enum class ChunkKind : uint8_t { kDense = 0, kSparse = 1 };
enum class Compression : uint8_t { kNone = 0, kZstd = 1 };

// Chunks start on 8-byte boundaries inside a bucket payload.
inline constexpr size_t kChunkAlignment = 8;
DC_HOST_DEVICE inline constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct ChunkHeader {
  static constexpr size_t kBytes = 56;

  uint32_t tensor_index = 0;
  ChunkKind kind = ChunkKind::kDense;
  uint8_t value_codec = 0;  // ValueCodec; 0 for dense chunks
  Compression compression = Compression::kNone;
  uint64_t element_start = 0;
  uint64_t element_count = 0;
  uint64_t nnz = 0;             // changed elements (sparse) or element_count (dense)
  uint64_t raw_body_bytes = 0;  // body size before compression
  uint64_t body_bytes = 0;      // stored body size that follows the header

  // Total bytes the chunk occupies in a payload, padding included.
  DC_HOST_DEVICE size_t stored_bytes() const { return align_up(kBytes + body_bytes, kChunkAlignment); }

  // Byte by byte, so that kernels can write headers at unaligned addresses too.
  DC_HOST_DEVICE void write(uint8_t* out) const {
    put(out + 0, tensor_index, 4);
    out[4] = static_cast<uint8_t>(kind);
    out[5] = value_codec;
    out[6] = static_cast<uint8_t>(compression);
    out[7] = 0;
    put(out + 8, element_start, 8);
    put(out + 16, element_count, 8);
    put(out + 24, nnz, 8);
    put(out + 32, 0, 8);  // reserved
    put(out + 40, raw_body_bytes, 8);
    put(out + 48, body_bytes, 8);
  }
  // Reads a header from untrusted bytes; rejects unknown enum values and non-zero reserved fields.
  static Result<ChunkHeader> parse(std::span<const uint8_t> bytes);

 private:
  DC_HOST_DEVICE static void put(uint8_t* p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
  }
};

inline constexpr uint32_t kBucketMagic = 0x4b424344;  // "DCBK" in memory order

enum BucketFlags : uint32_t {
  kBucketFull = 1u << 0,  // a full sync: every chunk dense, applies whatever the consumer holds
  // Cut down to the chunks one receiver's layout needs (a resharded version): a full sync then
  // covers what that layout holds, not every element, and is read only against that layout.
  kBucketSelected = 1u << 1,
};
inline constexpr uint32_t kKnownBucketFlags = kBucketFull | kBucketSelected;

struct BucketHeader {
  static constexpr size_t kBytes = 72;

  uint64_t manifest_hash = 0;
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  uint32_t bucket_index = 0;
  uint32_t bucket_count = 0;
  uint32_t chunk_count = 0;
  uint32_t flags = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // content_hash of the payload

  bool full() const { return (flags & kBucketFull) != 0; }
  bool selected() const { return (flags & kBucketSelected) != 0; }

  // Writes the header including its own checksum.
  void write(uint8_t* out) const;
  // Reads and self-checks a header from untrusted bytes: magic, version,
  // header checksum, flags, index/count consistency.
  static Result<BucketHeader> parse(std::span<const uint8_t> bytes);
};

}  // namespace deltacast
