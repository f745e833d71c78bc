#include "broadcast/transport/transfer.h"

#include "core/hash.h"

namespace deltacast {

uint64_t transfer_digest(std::span<const uint64_t> slice_checksums, uint64_t bytes) {
  // Checksums are u64 in host order; the host is little-endian (core/byte_io.h).
  return xxh3_64(slice_checksums.data(), slice_checksums.size_bytes(), bytes);
}

std::vector<uint64_t> slice_checksums(const uint8_t* data, const TransferShape& shape, ThreadPool& pool) {
  std::vector<uint64_t> checksums(shape.slices());
  pool.parallel_for(checksums.size(), [&](size_t i) {
    const auto slice = static_cast<uint32_t>(i);
    checksums[i] = content_hash(data + shape.offset(slice), shape.length(slice));
  });
  return checksums;
}

std::optional<std::vector<uint64_t>> slice_checksums_from_leaves(std::span<const uint64_t> leaves,
                                                                  const TransferShape& shape) {
  if (shape.slice_bytes % kHashLeafBytes != 0 || leaves.size() != content_hash_leaf_count(shape.bytes)) {
    return std::nullopt;
  }
  const size_t leaves_per_slice = shape.slice_bytes / kHashLeafBytes;
  std::vector<uint64_t> checksums(shape.slices());
  for (uint32_t i = 0; i < shape.slices(); ++i) {
    const uint32_t length = shape.length(i);
    checksums[i] = content_hash_from_leaves(leaves.data() + i * leaves_per_slice, content_hash_leaf_count(length), length);
  }
  return checksums;
}

std::vector<uint64_t> slice_checksums(const uint8_t* data, const TransferShape& shape, std::span<const uint64_t> leaves,
                                      ThreadPool& pool) {
  if (auto derived = slice_checksums_from_leaves(leaves, shape)) return std::move(*derived);
  return slice_checksums(data, shape, pool);
}

}  // namespace deltacast
