// The PFOR width rule of FORMAT.md as host/device code: from the histogram of
// bit lengths of a block's values, the layout with the fewest bytes, ties to
// the smallest width. The CPU encoder and the GPU kernels call this same
// function, which is how both produce the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace deltacast {

inline constexpr size_t kPforBlockValues = 128;

// How one block is laid out.
struct PforLayout {
  unsigned width = 0;            // b: bits stored for every value
  unsigned exceptions = 0;       // e: values >= 2^b
  unsigned exception_width = 0;  // hb: bits stored per exception for v >> b (0 when e == 0)
  size_t bytes = 0;              // encoded size of the block
};

DC_HOST_DEVICE inline constexpr size_t packed_bytes(size_t count, unsigned width) { return (count * width + 7) / 8; }

DC_HOST_DEVICE inline constexpr uint64_t low_mask(unsigned width) {
  return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
}

// Bit length of v (0 for 0), without a branch on v: ulp blocks mix 0 and 1,
// which a `v == 0 ? ...` would mispredict half the time.
DC_HOST_DEVICE inline unsigned bit_length(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 64 - static_cast<unsigned>(__clzll(static_cast<long long>(v)));
#else
  return 63 - static_cast<unsigned>(__builtin_clzll(v | 1)) + static_cast<unsigned>(v != 0);
#endif
}

DC_HOST_DEVICE inline size_t pfor_block_bytes(size_t count, unsigned width, unsigned exceptions,
                                              unsigned exception_width) {
  if (exceptions == 0) return 2 + packed_bytes(count, width);
  return 3 + packed_bytes(count, width) + exceptions + packed_bytes(exceptions, exception_width);
}

// `histogram[k]` counts the block's values of bit length k, for k <= max_bits.
DC_HOST_DEVICE inline PforLayout pfor_layout_from_histogram(const unsigned* histogram, unsigned max_bits,
                                                            size_t count) {
  PforLayout best{max_bits, 0, 0, pfor_block_bytes(count, max_bits, 0, 0)};
  unsigned above = 0;  // values whose bit length exceeds b
  for (int b = static_cast<int>(max_bits) - 1; b >= 0; --b) {
    above += histogram[b + 1];
    const unsigned width = static_cast<unsigned>(b);
    const unsigned exception_width = max_bits - width;
    const size_t bytes = pfor_block_bytes(count, width, above, exception_width);
    if (bytes <= best.bytes) best = PforLayout{width, above, exception_width, bytes};  // `<=`: ties go to the smaller b
  }
  return best;
}

// Upper bound of one block's encoded size.
DC_HOST_DEVICE inline constexpr size_t pfor_max_block_bytes(size_t count) { return 3 + 8 * count + count + 8 * count; }

}  // namespace deltacast
