#include "broadcast/engine/version_blob.h"

#include <cstring>

#include "core/byte_io.h"
#include "core/thread_pool.h"

namespace deltacast {

uint64_t blob_bytes(const std::vector<std::vector<uint8_t>>& buckets) {
  uint64_t bytes = 8 + 8 * buckets.size();
  for (const auto& b : buckets) bytes += b.size();
  return bytes;
}

AlignedBuffer pack_blob(const std::vector<std::vector<uint8_t>>& buckets) {
  AlignedBuffer blob(blob_bytes(buckets));
  pack_blob_into(buckets, blob.data());
  return blob;
}

void pack_blob_into(const std::vector<std::vector<uint8_t>>& buckets, uint8_t* out, ThreadPool* pool) {
  uint8_t* p = out;
  store_le<uint32_t>(p, kBlobMagic);
  store_le<uint32_t>(p + 4, static_cast<uint32_t>(buckets.size()));
  p += 8;
  std::vector<uint8_t*> places;
  places.reserve(buckets.size());
  uint8_t* body = p + 8 * buckets.size();
  for (const auto& b : buckets) {
    store_le<uint64_t>(p, b.size());
    p += 8;
    places.push_back(body);
    body += b.size();
  }
  const auto copy = [&](size_t i) {
    if (!buckets[i].empty()) std::memcpy(places[i], buckets[i].data(), buckets[i].size());
  };
  if (pool != nullptr) {
    pool->parallel_for(buckets.size(), copy);
  } else {
    for (size_t i = 0; i < buckets.size(); ++i) copy(i);
  }
}

Result<std::vector<std::span<const uint8_t>>> unpack_blob(std::span<const uint8_t> blob) {
  ByteReader r(blob);
  uint32_t magic = 0, count = 0;
  DC_RETURN_IF_ERROR(r.get(&magic, "blob magic"));
  if (magic != kBlobMagic) return corrupt("not a version blob (magic {:#010x})", magic);
  DC_RETURN_IF_ERROR(r.get(&count, "blob bucket count"));
  if (count > r.remaining() / 8) return corrupt("blob claims {} buckets in {} bytes", count, blob.size());
  std::vector<uint64_t> sizes(count);
  for (auto& s : sizes) DC_RETURN_IF_ERROR(r.get(&s, "blob bucket size"));
  std::vector<std::span<const uint8_t>> buckets;
  for (uint64_t s : sizes) {
    std::span<const uint8_t> b;
    DC_RETURN_IF_ERROR(r.get_bytes(s, &b, "blob bucket"));
    buckets.push_back(b);
  }
  if (!r.at_end()) return corrupt("{} bytes after the last bucket of the blob", r.remaining());
  return buckets;
}

}  // namespace deltacast
