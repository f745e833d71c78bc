// PFOR blocks (FORMAT.md) encoded and decoded by one warp: 32 lanes build
// the histogram, pack output bytes and compact exceptions in parallel. Same
// layout rule and same bytes as the CPU coder (sparse/pfor.cc); the unit
// tests compare the two on the host through simt::HostWarp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "sparse/cuda/simt.h"
#include "sparse/pfor_layout.h"

namespace deltacast::simt {

// Shared memory one warp needs for one block.
struct PforWarpScratch {
  unsigned histogram[65];
  unsigned lane_count[kWarpSize];   // exceptions among each lane's values
  unsigned lane_offset[kWarpSize];  // where each lane's exceptions go
  uint64_t highs[kPforBlockValues];
  PforLayout layout;
};

// Byte k of the bit-packing (FORMAT.md) of values[0, n) at `width` bits.
DC_HOST_DEVICE inline uint8_t packed_byte(const uint64_t* values, unsigned n, unsigned width, size_t k) {
  if (width == 0) return 0;
  const uint64_t first_bit = 8 * static_cast<uint64_t>(k);
  uint64_t byte = 0;
  for (uint64_t i = first_bit / width; i < n; ++i) {
    const uint64_t start = i * width;
    if (start >= first_bit + 8) break;
    const uint64_t v = values[i] & low_mask(width);
    byte |= start >= first_bit ? v << (start - first_bit) : v >> (first_bit - start);
  }
  return static_cast<uint8_t>(byte);
}

// `width` bits at bit offset `bit` of a packed run (width <= 64).
DC_HOST_DEVICE inline uint64_t read_bits(const uint8_t* run, uint64_t bit, unsigned width) {
  if (width == 0) return 0;
  const uint8_t* p = run + bit / 8;
  const unsigned shift = static_cast<unsigned>(bit % 8);
  uint64_t v = static_cast<uint64_t>(p[0]) >> shift;
  for (unsigned k = 1; 8 * k < shift + width; ++k) {
    const unsigned at = 8 * k - shift;
    if (at < 64) v |= static_cast<uint64_t>(p[k]) << at;
  }
  return v & low_mask(width);
}

// True when the bits after a run of n values of `width` bits, up to the end of its last byte, are zero.
DC_HOST_DEVICE inline bool padding_zero(const uint8_t* run, unsigned n, unsigned width) {
  const uint64_t used = static_cast<uint64_t>(n) * width;
  return used % 8 == 0 || (run[used / 8] >> (used % 8)) == 0;
}

// The layout of values[0, n) (1 <= n <= 128); every lane gets it.
template <typename Warp>
DC_HOST_DEVICE PforLayout warp_pfor_layout(const Warp& x, const uint64_t* values, unsigned n, PforWarpScratch& s) {
  x.lanes([&](unsigned lane) {
    for (unsigned k = lane; k < 65; k += kWarpSize) s.histogram[k] = 0;
  });
  x.sync();
  x.lanes([&](unsigned lane) {
    for (unsigned i = lane; i < n; i += kWarpSize) x.atomic_add(&s.histogram[bit_length(values[i])], 1u);
  });
  x.sync();
  x.lanes([&](unsigned lane) {
    if (lane != 0) return;
    unsigned max_bits = 64;
    while (max_bits > 0 && s.histogram[max_bits] == 0) --max_bits;
    s.layout = pfor_layout_from_histogram(s.histogram, max_bits, n);
  });
  x.sync();
  return s.layout;
}

// Encodes values[0, n) at `out`; returns the block's size. The values array
// must be readable by every lane (shared memory on the device).
template <typename Warp>
DC_HOST_DEVICE size_t warp_pfor_encode(const Warp& x, const uint64_t* values, unsigned n, uint8_t* out,
                                       PforWarpScratch& s) {
  const PforLayout layout = warp_pfor_layout(x, values, n, s);
  const unsigned b = layout.width;
  const unsigned e = layout.exceptions;
  const size_t header = e > 0 ? 3 : 2;
  const size_t low_bytes = packed_bytes(n, b);
  x.lanes([&](unsigned lane) {
    if (lane == 0) {
      out[0] = static_cast<uint8_t>(b);
      out[1] = static_cast<uint8_t>(e);
      if (e > 0) out[2] = static_cast<uint8_t>(layout.exception_width);
    }
    for (size_t k = lane; k < low_bytes; k += kWarpSize) out[header + k] = packed_byte(values, n, b, k);
  });
  if (e == 0) {
    x.sync();
    return layout.bytes;
  }
  // Exceptions in position order: lane l owns values [4l, 4l + 4); a scan of the lanes' counts gives
  // each lane its first slot.
  const uint64_t limit = ~low_mask(b);
  x.lanes([&](unsigned lane) {
    unsigned c = 0;
    for (unsigned i = 4 * lane; i < 4 * lane + 4 && i < n; ++i) c += (values[i] & limit) != 0;
    s.lane_count[lane] = c;
  });
  x.sync();
  x.lanes([&](unsigned lane) {
    if (lane != 0) return;
    unsigned total = 0;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      s.lane_offset[l] = total;
      total += s.lane_count[l];
    }
  });
  x.sync();
  uint8_t* positions = out + header + low_bytes;
  x.lanes([&](unsigned lane) {
    unsigned j = s.lane_offset[lane];
    for (unsigned i = 4 * lane; i < 4 * lane + 4 && i < n; ++i) {
      if ((values[i] & limit) == 0) continue;
      positions[j] = static_cast<uint8_t>(i);
      s.highs[j] = values[i] >> b;
      ++j;
    }
  });
  x.sync();
  const size_t high_bytes = packed_bytes(e, layout.exception_width);
  x.lanes([&](unsigned lane) {
    for (size_t k = lane; k < high_bytes; k += kWarpSize) {
      positions[e + k] = packed_byte(s.highs, e, layout.exception_width, k);
    }
  });
  x.sync();
  return layout.bytes;
}

// What one warp needs in shared memory to decode a block.
struct PforDecodeScratch {
  PforLayout layout;
  unsigned failed;  // non-zero when the block is malformed
};

// The layout a block's header declares for n values, from untrusted `in`
// (avail bytes readable): bytes is 0 when the header is malformed or the
// block runs past `avail`. Reads the 2 or 3 header bytes only, which is what
// lets a decoder hop from block to block (the padding and exception order
// are checked when the block is decoded).
DC_HOST_DEVICE inline PforLayout pfor_parse_header(const uint8_t* in, size_t avail, unsigned n) {
  if (avail < 2) return {};
  const unsigned b = in[0];
  const unsigned e = in[1];
  if (b > 64 || e > n) return {};
  unsigned hb = 0;
  if (e > 0) {
    if (avail < 3) return {};
    hb = in[2];
    if (hb == 0 || b + hb > 64) return {};
  }
  const size_t bytes = pfor_block_bytes(n, b, e, hb);
  if (bytes > avail) return {};
  return PforLayout{b, e, hb, bytes};
}

// Values of one block each lane decodes at most (n <= kPforBlockValues).
inline constexpr unsigned kValuesPerLane = kPforBlockValues / kWarpSize;

// values[i] = read(i) for i in [0, n) (n <= kPforBlockValues), a lane's (at most four) reads all
// issued before its first store: a store between two reads would order each read after the
// previous one's bytes arrived (the compiler cannot tell that `values` and what `read` reads do not
// overlap), four trips to memory instead of one (Nsight Compute: 73 cycles per instruction in the
// apply kernel). Ends with a sync.
template <typename Warp, typename Read>
DC_HOST_DEVICE void warp_read_then_store(const Warp& x, unsigned n, uint64_t* values, Read read) {
  x.lanes([&](unsigned lane) {
    uint64_t v[kValuesPerLane];
DC_UNROLL
    for (unsigned r = 0; r < kValuesPerLane; ++r) {
      const unsigned i = lane + r * kWarpSize;
      v[r] = i < n ? read(i) : 0;
    }
DC_UNROLL
    for (unsigned r = 0; r < kValuesPerLane; ++r) {
      if (lane + r * kWarpSize < n) values[lane + r * kWarpSize] = v[r];
    }
  });
  x.sync();
}

// Decodes one block of n values (1 <= n <= kPforBlockValues) from untrusted `in` (avail bytes
// readable). Returns the block's size, or 0 when it is malformed (a block is never 0 bytes).
template <typename Warp>
DC_HOST_DEVICE size_t warp_pfor_decode(const Warp& x, const uint8_t* in, size_t avail, unsigned n, uint64_t* values,
                                       PforDecodeScratch& s) {
  if (n == 0 || n > kPforBlockValues) return 0;  // no block holds that many (or no) values
  x.sync();  // every lane has read s.failed and s.layout of the block before (a warp decodes blocks back to back)
  x.lanes([&](unsigned lane) {
    if (lane != 0) return;
    s.failed = 1;
    const PforLayout layout = pfor_parse_header(in, avail, n);
    if (layout.bytes == 0) return;
    const size_t header = layout.exceptions > 0 ? 3 : 2;
    if (!padding_zero(in + header, n, layout.width)) return;
    if (layout.exceptions > 0 && !padding_zero(in + header + packed_bytes(n, layout.width) + layout.exceptions,
                                               layout.exceptions, layout.exception_width)) {
      return;
    }
    s.layout = layout;
    s.failed = 0;
  });
  x.sync();
  if (s.failed) return 0;
  const PforLayout layout = s.layout;
  const size_t header = layout.exceptions > 0 ? 3 : 2;
  warp_read_then_store(x, n, values, [&](unsigned i) {
    return read_bits(in + header, static_cast<uint64_t>(i) * layout.width, layout.width);
  });
  if (layout.exceptions > 0) {
    const uint8_t* positions = in + header + packed_bytes(n, layout.width);
    const uint8_t* highs = positions + layout.exceptions;
    // Every position is checked before any lane writes: positions that are not strictly increasing
    // (a forged block) could name one value from two lanes, and two read-modify-writes of one
    // shared word race even when the block is then thrown away.
    x.lanes([&](unsigned lane) {
      for (unsigned j = lane; j < layout.exceptions; j += kWarpSize) {
        const unsigned at = positions[j];
        if (at >= n || (j > 0 && at <= positions[j - 1])) x.atomic_add(&s.failed, 1u);
      }
    });
    x.sync();
    if (s.failed) return 0;
    x.lanes([&](unsigned lane) {  // reads first, then writes, as above
      uint64_t high[kValuesPerLane];
DC_UNROLL
      for (unsigned r = 0; r < kValuesPerLane; ++r) {
        const unsigned j = lane + r * kWarpSize;
        high[r] = j < layout.exceptions ? read_bits(highs, static_cast<uint64_t>(j) * layout.exception_width,
                                                    layout.exception_width)
                                        : 0;
      }
DC_UNROLL
      for (unsigned r = 0; r < kValuesPerLane; ++r) {
        const unsigned j = lane + r * kWarpSize;
        if (j < layout.exceptions) values[positions[j]] |= high[r] << layout.width;
      }
    });
    x.sync();
  }
  return layout.bytes;
}

}  // namespace deltacast::simt
