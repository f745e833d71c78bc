#include "broadcast/transport/transfer.h"

#include "core/hash.h"

namespace deltacast {

uint64_t transfer_digest(std::span<const uint64_t> slice_checksums, uint64_t bytes) {
  // Checksums are u64 in host order; the host is little-endian (core/byte_io.h).
  return xxh3_64(slice_checksums.data(), slice_checksums.size_bytes(), bytes);
}

std::vector<uint64_t> slice_checksums(const uint8_t* data, const TransferShape& shape, ThreadPool& pool) {
  std::vector<uint64_t> checksums(shape.slices());
  pool.parallel_for(checksums.size(),
                    [&](size_t i) { checksums[i] = xxh3_64(data + shape.offset(static_cast<uint32_t>(i)), shape.length(static_cast<uint32_t>(i))); });
  return checksums;
}

}  // namespace deltacast
