#include "sparse/bitpack.h"

#include <array>
#include <cstring>
#include <utility>

#include "core/byte_io.h"

namespace deltacast {

void pack_bits(const uint64_t* values, size_t count, unsigned width, uint8_t* out) {
  if (width == 0) return;
  const uint64_t mask = low_mask(width);
  uint64_t acc = 0;
  unsigned used = 0;  // bits of acc already filled, always < 64
  for (size_t i = 0; i < count; ++i) {
    const uint64_t v = values[i] & mask;
    acc |= v << used;
    if (used + width >= 64) {
      store_le<uint64_t>(out, acc);
      out += 8;
      const unsigned consumed = 64 - used;  // bits of v that fit in the word just written
      acc = consumed < 64 ? v >> consumed : 0;
      used = used + width - 64;
    } else {
      used += width;
    }
  }
  // Flush the partial word: only the bytes that hold bits.
  for (unsigned b = 0; b < used; b += 8) *out++ = static_cast<uint8_t>(acc >> b);
}

namespace {

// Reads 8 bytes at `p` when they lie inside [p, end), else assembles what is there.
inline uint64_t load_word(const uint8_t* p, const uint8_t* end) {
  if (end - p >= 8) return load_le<uint64_t>(p);
  uint64_t w = 0;
  for (int i = 0; p + i < end; ++i) w |= uint64_t{p[i]} << (8 * i);
  return w;
}

template <unsigned kWidth>
void unpack_fixed(const uint8_t* in, const uint8_t* end, size_t count, uint64_t* values) {
  constexpr uint64_t kMask = low_mask(kWidth);
  size_t bit = 0;
  for (size_t i = 0; i < count; ++i, bit += kWidth) {
    const uint8_t* p = in + (bit >> 3);
    const unsigned shift = bit & 7;
    uint64_t v = load_word(p, end) >> shift;
    if constexpr (kWidth > 56) {
      // A value can straddle 9 bytes when the shift plus the width passes 64.
      if (shift + kWidth > 64) v |= uint64_t{p[8]} << (64 - shift);
    }
    values[i] = v & kMask;
  }
}

using UnpackFn = void (*)(const uint8_t*, const uint8_t*, size_t, uint64_t*);

template <unsigned... kWidths>
constexpr auto make_unpack_table(std::integer_sequence<unsigned, kWidths...>) {
  return std::array<UnpackFn, sizeof...(kWidths)>{&unpack_fixed<kWidths>...};
}

// One specialised loop per width: constant shifts and masks are several
// times faster than a width read at run time.
constexpr auto kUnpackTable = make_unpack_table(std::make_integer_sequence<unsigned, 65>{});

}  // namespace

void unpack_bits(const uint8_t* in, size_t in_size, size_t count, unsigned width, uint64_t* values) {
  if (width == 0) {
    std::memset(values, 0, count * sizeof(uint64_t));
    return;
  }
  kUnpackTable[width](in, in + in_size, count, values);
}

}  // namespace deltacast
