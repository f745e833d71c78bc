// One description of a transfer, shared by everyone who handles its slices:
// the sprayer that sends it, a relay that forwards it, and the staging that
// receives it. A transfer's bytes are cut into slices of slice_bytes; the
// last one may be shorter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "broadcast/transport/transport.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace deltacast {

struct TransferShape {
  uint64_t id = 0;
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;

  // Checks that the bytes fit in 2^32 slices of a non-zero size.
  static Result<TransferShape> make(uint64_t id, uint64_t bytes, uint32_t slice_bytes) {
    if (slice_bytes == 0) return invalid_argument("transfer {}: slices of 0 bytes", id);
    if ((bytes + slice_bytes - 1) / slice_bytes > UINT32_MAX) {
      return invalid_argument("transfer {}: {} bytes is too many slices of {}", id, bytes, slice_bytes);
    }
    return TransferShape{id, bytes, slice_bytes};
  }

  uint32_t slices() const {
    return slice_bytes == 0 ? 0 : static_cast<uint32_t>((bytes + slice_bytes - 1) / slice_bytes);
  }
  uint64_t offset(uint32_t slice) const { return static_cast<uint64_t>(slice) * slice_bytes; }
  uint32_t length(uint32_t slice) const {
    return static_cast<uint32_t>(std::min<uint64_t>(slice_bytes, bytes - offset(slice)));
  }
  // `leaf_tags`: the transfer's, where its maker tagged its bytes (SliceRef::leaf_tags).
  SliceRef slice(uint32_t index, uint64_t checksum, std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr) const {
    return SliceRef{id, bytes, slice_bytes, index, length(index), checksum, true, std::move(leaf_tags)};
  }
  // A slice whose checksum its channel computes when it sends it.
  SliceRef unhashed_slice(uint32_t index) const {
    return SliceRef{id, bytes, slice_bytes, index, length(index), 0, false, nullptr};
  }
};

// A transfer's digest: XXH3-64 of the little-endian array of its slices'
// checksums, seeded with its byte count. The sender announces it; a receiver
// computes it from the checksums its slices were verified against on arrival,
// so checking the whole transfer costs no pass over its bytes, and a slice
// that lands under another index, or is missing, changes it.
uint64_t transfer_digest(std::span<const uint64_t> slice_checksums, uint64_t bytes);

// Every slice's checksum of `data` cut as `shape` says (in parallel on `pool`).
std::vector<uint64_t> slice_checksums(const uint8_t* data, const TransferShape& shape, ThreadPool& pool);

// The same from the content-hash leaf digests of the whole transfer (core/hash.h), taken where
// its bytes were made: no pass over the bytes. Slices must start on leaves (slice_bytes a
// multiple of kHashLeafBytes); nullopt when they do not or `leaves` is not the transfer's.
std::optional<std::vector<uint64_t>> slice_checksums_from_leaves(std::span<const uint64_t> leaves,
                                                                  const TransferShape& shape);

// From the leaves when they fit the shape, else by hashing the bytes.
std::vector<uint64_t> slice_checksums(const uint8_t* data, const TransferShape& shape, std::span<const uint64_t> leaves,
                                      ThreadPool& pool);

}  // namespace deltacast
