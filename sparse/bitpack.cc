#include "sparse/bitpack.h"

#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "core/byte_io.h"

namespace deltacast {

namespace {

template <unsigned kWidth>
void pack_fixed(const uint64_t* values, size_t count, uint8_t* out) {
  constexpr unsigned width = kWidth;
  constexpr uint64_t mask = low_mask(kWidth);
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

// Reads 8 bytes at `p` when they lie inside [p, end), else assembles what is there.
inline uint64_t load_word(const uint8_t* p, const uint8_t* end) {
  if (end - p >= 8) return load_le<uint64_t>(p);
  uint64_t w = 0;
  for (int i = 0; p + i < end; ++i) w |= uint64_t{p[i]} << (8 * i);
  return w;
}

// Value at bit offset kBit of a run of kWidth-bit values starting at p.
template <unsigned kWidth, size_t kBit>
inline uint64_t extract(const uint8_t* p) {
  uint64_t v = load_le<uint64_t>(p + kBit / 8) >> (kBit % 8);
  if constexpr (kBit % 8 + kWidth > 64) v |= uint64_t{p[kBit / 8 + 8]} << (64 - kBit % 8);
  return v & low_mask(kWidth);
}

// Eight values take exactly kWidth bytes, so a group's shifts and offsets are
// all compile-time constants.
template <unsigned kWidth, size_t... kJ>
inline void unpack_group(const uint8_t* p, uint64_t* out, std::index_sequence<kJ...>) {
  ((out[kJ] = extract<kWidth, kJ * kWidth>(p)), ...);
}

template <unsigned kWidth>
void unpack_fixed(const uint8_t* in, const uint8_t* end, size_t count, uint64_t* values) {
  constexpr uint64_t kMask = low_mask(kWidth);
  size_t i = 0;
  // A group reads at most kWidth + 9 bytes from its start; groups that fit take the fast path.
  const uint8_t* p = in;
  for (; i + 8 <= count && end - p >= static_cast<ptrdiff_t>(kWidth + 9); i += 8, p += kWidth) {
    unpack_group<kWidth>(p, values + i, std::make_index_sequence<8>{});
  }
  size_t bit = i * kWidth;
  for (; i < count; ++i, bit += kWidth) {
    const uint8_t* q = in + (bit >> 3);
    const unsigned shift = bit & 7;
    uint64_t v = load_word(q, end) >> shift;
    if constexpr (kWidth > 56) {
      // A value can straddle 9 bytes when the shift plus the width passes 64.
      if (shift + kWidth > 64) v |= uint64_t{q[8]} << (64 - shift);
    }
    values[i] = v & kMask;
  }
}

using PackFn = void (*)(const uint64_t*, size_t, uint8_t*);
using UnpackFn = void (*)(const uint8_t*, const uint8_t*, size_t, uint64_t*);

template <unsigned... kWidths>
constexpr auto make_pack_table(std::integer_sequence<unsigned, kWidths...>) {
  return std::array<PackFn, sizeof...(kWidths)>{&pack_fixed<kWidths>...};
}

template <unsigned... kWidths>
constexpr auto make_unpack_table(std::integer_sequence<unsigned, kWidths...>) {
  return std::array<UnpackFn, sizeof...(kWidths)>{&unpack_fixed<kWidths>...};
}

// One specialised loop per width: constant shifts and masks are several
// times faster than a width read at run time.
constexpr auto kPackTable = make_pack_table(std::make_integer_sequence<unsigned, 65>{});
constexpr auto kUnpackTable = make_unpack_table(std::make_integer_sequence<unsigned, 65>{});

}  // namespace

void pack_bits(const uint64_t* values, size_t count, unsigned width, uint8_t* out) {
  if (width == 0) return;
  kPackTable[width](values, count, out);
}

void unpack_bits(const uint8_t* in, size_t in_size, size_t count, unsigned width, uint64_t* values) {
  if (width == 0) {
    std::memset(values, 0, count * sizeof(uint64_t));
    return;
  }
  kUnpackTable[width](in, in + in_size, count, values);
}

}  // namespace deltacast
