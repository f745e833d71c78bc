// The 40-byte slice header every backend puts on the wire in front of a
// slice's payload (TCP frames, RDMA slots): one layout, so that a slice means
// the same on every transport.
//
//   u64 transfer, u64 transfer bytes, u32 slice bytes, u32 index, u32 length,
//   u32 reserved (0), u64 checksum                       (all little-endian)
#pragma once

#include <cstddef>
#include <cstdint>

#include "broadcast/transport/transport.h"

namespace deltacast {

inline constexpr size_t kSliceHeaderBytes = 40;

void encode_slice_header(const SliceRef& slice, uint8_t* out);
// Decodes the fields; the caller checks them against what it expects.
SliceRef decode_slice_header(const uint8_t* in);

}  // namespace deltacast
