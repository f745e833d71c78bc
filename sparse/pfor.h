// Patched frame-of-reference (PFOR) coding of unsigned integers in blocks of
// 128: each block picks the bit width `b` that minimises its encoded size,
// packs every value's low `b` bits, and stores the few values that do not fit
// ("exceptions") as (position, high bits) patches. Index gaps and `ulp` value
// deltas are both coded this way. The byte layout is in sparse/FORMAT.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/byte_buffer.h"
#include "core/status.h"
#include "sparse/pfor_layout.h"

namespace deltacast {

// The smallest layout for `count` (1..128) values; ties go to the smallest b.
PforLayout pfor_choose_layout(const uint64_t* values, size_t count);

// Upper bound of the encoded size of `count` values.
inline constexpr size_t pfor_max_bytes(size_t count) {
  return (count / kPforBlockValues + 1) * pfor_max_block_bytes(kPforBlockValues);
}

// Encodes one block of 1..128 values at `out`, which must have room for
// pfor_max_block_bytes(count). Returns the bytes written.
size_t pfor_encode_block(const uint64_t* values, size_t count, uint8_t* out);

// Decodes one block of `count` values from untrusted `in`, checking every
// field; on success sets `*consumed` to the block's size.
Status pfor_decode_block(std::span<const uint8_t> in, size_t count, uint64_t* values, size_t* consumed);

// Encodes one block of 1..128 values appended to `out`.
inline void pfor_append_block(const uint64_t* values, size_t count, ByteBuffer* out) {
  const size_t at = out->size();
  out->truncate(at + pfor_encode_block(values, count, out->extend(pfor_max_block_bytes(count))));
}

// Encodes `count` values as consecutive blocks appended to `out`.
void pfor_encode(const uint64_t* values, size_t count, ByteBuffer* out);

}  // namespace deltacast
