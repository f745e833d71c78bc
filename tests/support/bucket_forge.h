// Tools for forging buckets in tests: field offsets of the documented layout
// and a re-seal that recomputes both checksums, so that a forged bucket
// reaches the structural checks the way an attacker's would.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/byte_io.h"
#include "core/hash.h"
#include "sparse/format.h"

namespace deltacast::testing {

// Offsets inside a bucket (sparse/FORMAT.md).
namespace bucket_field {
inline constexpr size_t kManifestHash = 8, kBase = 16, kTarget = 24, kBucketIndex = 32, kBucketCount = 36,
                        kChunkCount = 40, kFlags = 44, kPayloadBytes = 48, kPayloadChecksum = 56, kHeaderChecksum = 64;
}
// Offsets inside a chunk header, relative to the chunk's start.
namespace chunk_field {
inline constexpr size_t kTensor = 0, kKind = 4, kCodec = 5, kCompression = 6, kReserved = 7, kElementStart = 8,
                        kElementCount = 16, kNnz = 24, kReserved64 = 32, kRawBodyBytes = 40, kBodyBytes = 48;
}
inline constexpr size_t kFirstChunk = BucketHeader::kBytes;

inline void reseal(std::vector<uint8_t>& bucket) {
  const size_t payload = bucket.size() - BucketHeader::kBytes;
  store_le<uint64_t>(bucket.data() + bucket_field::kPayloadChecksum,
                     content_hash(bucket.data() + BucketHeader::kBytes, payload));
  store_le<uint64_t>(bucket.data() + bucket_field::kHeaderChecksum, xxh3_64(bucket.data(), 64));
}

// A copy of a version's buckets with 1 to 3 random bytes of one bucket's chunks overwritten, and
// that bucket resealed: only decoding (or applying) can tell.
template <typename Rng>
std::vector<std::vector<uint8_t>> forged_version(const std::vector<std::vector<uint8_t>>& buckets, Rng& rng) {
  auto forged = buckets;
  auto& bucket = forged[rng() % forged.size()];
  for (int e = 0; e < 1 + static_cast<int>(rng() % 3); ++e) {
    bucket[kFirstChunk + rng() % (bucket.size() - kFirstChunk)] = static_cast<uint8_t>(rng());
  }
  reseal(bucket);
  return forged;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T value) {
  store_le<T>(bytes.data() + at, value);
}

template <typename T>
T peek(const std::vector<uint8_t>& bytes, size_t at) {
  return load_le<T>(bytes.data() + at);
}

}  // namespace deltacast::testing
