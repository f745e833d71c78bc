// Fixed-width bit packing, the innermost piece of the index and value codecs.
//
// Value i of a packed run of width w occupies bits [i*w, (i+1)*w) of the byte
// stream, least significant bit first; bit k of the stream is bit (k % 8) of
// byte k / 8. A run of n values takes exactly ceil(n*w/8) bytes; the unused
// high bits of the last byte are zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sparse/pfor_layout.h"  // packed_bytes, low_mask

namespace deltacast {


// Packs the low `width` bits (0..64) of each value; writes packed_bytes(count, width) bytes.
void pack_bits(const uint64_t* values, size_t count, unsigned width, uint8_t* out);

// Unpacks `count` values of `width` bits from `in`. `in_size` is how many bytes
// may be read from `in` (at least packed_bytes(count, width)); reading ahead
// within that span is how the fast path avoids byte-at-a-time loads.
void unpack_bits(const uint8_t* in, size_t in_size, size_t count, unsigned width, uint64_t* values);

}  // namespace deltacast
