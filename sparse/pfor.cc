#include "sparse/pfor.h"

#include <algorithm>
#include <bit>

#include "sparse/bitpack.h"

namespace deltacast {

namespace {

// True when the bits after the last value of a packed run, up to the end of its last byte, are zero.
inline bool padding_is_zero(const uint8_t* run, size_t count, unsigned width) {
  const size_t used_bits = count * width;
  if (used_bits % 8 == 0) return true;
  return (run[used_bits / 8] >> (used_bits % 8)) == 0;
}

}  // namespace

PforLayout pfor_choose_layout(const uint64_t* values, size_t count) {
  // Four histograms filled round-robin: a block's values mostly share a bit length, and
  // incrementing one counter 128 times in a row is a chain of dependent read-modify-writes.
  uint8_t partial[4][65] = {};  // a block holds at most 128 values, so 8-bit counters suffice
  uint64_t all_bits = 0;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    ++partial[0][bit_length(values[i])];
    ++partial[1][bit_length(values[i + 1])];
    ++partial[2][bit_length(values[i + 2])];
    ++partial[3][bit_length(values[i + 3])];
    all_bits |= values[i] | values[i + 1] | values[i + 2] | values[i + 3];
  }
  for (; i < count; ++i) {
    ++partial[0][bit_length(values[i])];
    all_bits |= values[i];
  }
  const unsigned max_bits = bit_length(all_bits);
  unsigned histogram[65];
  for (unsigned k = 0; k <= max_bits; ++k) histogram[k] = partial[0][k] + partial[1][k] + partial[2][k] + partial[3][k];
  return pfor_layout_from_histogram(histogram, max_bits, count);
}

size_t pfor_encode_block(const uint64_t* values, size_t count, uint8_t* out) {
  const PforLayout layout = pfor_choose_layout(values, count);
  uint8_t* p = out;
  *p++ = static_cast<uint8_t>(layout.width);
  *p++ = static_cast<uint8_t>(layout.exceptions);
  if (layout.exceptions > 0) *p++ = static_cast<uint8_t>(layout.exception_width);
  pack_bits(values, count, layout.width, p);
  p += packed_bytes(count, layout.width);
  if (layout.exceptions > 0) {
    uint64_t highs[kPforBlockValues];
    unsigned e = 0;
    const uint64_t limit_mask = ~low_mask(layout.width);
    // Branch-free compaction (exceptions fall at random places): every value is written at
    // slot e, and e only advances past the exceptions. Slot e <= i < count stays in bounds.
    for (size_t i = 0; i < count; ++i) {
      p[e] = static_cast<uint8_t>(i);
      highs[e] = values[i] >> layout.width;
      e += (values[i] & limit_mask) != 0;
    }
    p += e;
    pack_bits(highs, e, layout.exception_width, p);
    p += packed_bytes(e, layout.exception_width);
  }
  return static_cast<size_t>(p - out);
}

Status pfor_decode_block(std::span<const uint8_t> in, size_t count, uint64_t* values, size_t* consumed) {
  if (in.size() < 2) return corrupt("PFOR block header truncated ({} bytes left)", in.size());
  const unsigned width = in[0];
  const unsigned exceptions = in[1];
  if (width > 64) return corrupt("PFOR block width {} exceeds 64", width);
  if (exceptions > count) return corrupt("PFOR block claims {} exceptions in {} values", exceptions, count);
  size_t pos = 2;
  unsigned exception_width = 0;
  if (exceptions > 0) {
    if (in.size() < 3) return corrupt("PFOR block exception header truncated");
    exception_width = in[2];
    pos = 3;
    if (exception_width == 0 || width + exception_width > 64) {
      return corrupt("PFOR block exception width {} invalid with width {}", exception_width, width);
    }
  }
  const size_t low_bytes = packed_bytes(count, width);
  const size_t high_bytes = packed_bytes(exceptions, exception_width);
  const size_t total = pos + low_bytes + exceptions + high_bytes;
  if (total > in.size()) return corrupt("PFOR block needs {} bytes, {} left", total, in.size());
  // The encoder leaves the unused bits of a run's last byte zero; insisting on it keeps the
  // encoding canonical, so a forged value count that ends inside the same byte is caught.
  if (!padding_is_zero(in.data() + pos, count, width)) return corrupt("PFOR block has non-zero padding bits");
  // Unpacking may read ahead to the end of `in`; the bytes past the section are masked off.
  unpack_bits(in.data() + pos, in.size() - pos, count, width, values);
  pos += low_bytes;
  if (exceptions > 0) {
    const uint8_t* positions = in.data() + pos;
    pos += exceptions;
    if (!padding_is_zero(in.data() + pos, exceptions, exception_width)) {
      return corrupt("PFOR exception run has non-zero padding bits");
    }
    uint64_t highs[kPforBlockValues];
    unpack_bits(in.data() + pos, in.size() - pos, exceptions, exception_width, highs);
    int previous = -1;
    for (unsigned j = 0; j < exceptions; ++j) {
      const int at = positions[j];
      if (at <= previous || static_cast<size_t>(at) >= count) {
        return corrupt("PFOR exception position {} out of order or beyond {} values", at, count);
      }
      previous = at;
      values[at] |= highs[j] << width;
    }
  }
  *consumed = total;
  return Status();
}

void pfor_encode(const uint64_t* values, size_t count, ByteBuffer* out) {
  for (size_t start = 0; start < count; start += kPforBlockValues) {
    pfor_append_block(values + start, std::min(kPforBlockValues, count - start), out);
  }
}

}  // namespace deltacast
