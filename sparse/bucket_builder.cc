#include "sparse/bucket_builder.h"

#include <cstring>

#include "core/hash.h"

namespace deltacast {

namespace {

struct Plan {
  size_t first = 0;  // index into chunks
  size_t end = 0;
  uint64_t payload_bytes = 0;
  uint32_t chunk_count = 0;
};

}  // namespace

std::vector<std::vector<uint8_t>> build_buckets(std::span<const std::span<const uint8_t>> chunks, uint64_t bucket_bytes,
                                                const BucketStamp& stamp, ThreadPool& pool) {
  // Cut the ordered runs into buckets.
  std::vector<Plan> plans(1);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].empty()) continue;
    if (plans.back().payload_bytes > 0 && plans.back().payload_bytes + chunks[i].size() > bucket_bytes) {
      plans.push_back(Plan{i, i, 0, 0});
    }
    Plan& p = plans.back();
    if (p.payload_bytes == 0) p.first = i;
    p.end = i + 1;
    p.payload_bytes += chunks[i].size();
    ++p.chunk_count;
  }
  std::vector<std::vector<uint8_t>> buckets(plans.size());
  pool.parallel_for(plans.size(), [&](size_t b) {
    const Plan& p = plans[b];
    std::vector<uint8_t>& out = buckets[b];
    // reserve + insert copies each chunk once; resize would zero the payload first.
    out.reserve(BucketHeader::kBytes + p.payload_bytes);
    out.resize(BucketHeader::kBytes);
    for (size_t i = p.first; i < p.end; ++i)
      out.insert(out.end(), chunks[i].data(), chunks[i].data() + chunks[i].size());
    const uint8_t* payload = out.data() + BucketHeader::kBytes;
    BucketHeader h;
    h.manifest_hash = stamp.manifest_hash;
    h.base_version = stamp.base_version;
    h.target_version = stamp.target_version;
    h.flags = stamp.flags;
    h.bucket_index = static_cast<uint32_t>(b);
    h.bucket_count = static_cast<uint32_t>(plans.size());
    h.chunk_count = p.chunk_count;
    h.payload_bytes = p.payload_bytes;
    h.payload_checksum = content_hash(payload, p.payload_bytes);
    h.write(out.data());
  });
  return buckets;
}

}  // namespace deltacast
