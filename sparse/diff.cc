#include "sparse/diff.h"

#include <algorithm>
#include <cstring>

#include "core/byte_io.h"

namespace deltacast {

namespace {

constexpr size_t kLineBytes = 64;

// Room for `more` records after the first `n`.
inline void make_room(DiffResult* out, size_t n, size_t more) {
  if (n + more > out->positions.capacity()) {
    const size_t want = std::max<size_t>(n + more, 4096);
    out->positions.grow(want, n);
    out->old_bits.grow(want, n);
    out->new_bits.grow(want, n);
  }
}

template <typename U>
inline void record(const U* cur, U* shadow, size_t begin, size_t end, DiffResult* out, size_t* n) {
  make_room(out, *n, end - begin);
  uint64_t* pos = out->positions.data();
  uint64_t* old_bits = out->old_bits.data();
  uint64_t* new_bits = out->new_bits.data();
  for (size_t j = begin; j < end; ++j) {
    const U c = cur[j];
    const U s = shadow[j];
    if (c != s) {
      pos[*n] = j;
      old_bits[*n] = s;
      new_bits[*n] = c;
      shadow[j] = c;
      ++*n;
    }
  }
}

// True when the 64-byte lines at a and b differ. Written as a branch-free
// reduction so the compiler turns it into a few vector compares.
inline bool line_differs(const uint8_t* a, const uint8_t* b) {
  uint64_t x = 0;
  for (size_t k = 0; k < kLineBytes; k += 8) x |= load_le<uint64_t>(a + k) ^ load_le<uint64_t>(b + k);
  return x != 0;
}

// Most 64-byte lines of an RL delta are untouched (~1% of elements change),
// so the loop skips whole clean lines and looks at elements only in dirty ones.
template <typename U>
__attribute__((target_clones("avx2", "default"))) size_t diff_lines(const uint8_t* current, uint8_t* shadow,
                                                                       size_t count, DiffResult* out) {
  const U* cur = reinterpret_cast<const U*>(current);
  U* sh = reinterpret_cast<U*>(shadow);
  constexpr size_t kPerLine = kLineBytes / sizeof(U);
  const size_t full = count - count % kPerLine;
  size_t n = 0;
  for (size_t i = 0; i < full; i += kPerLine) {
    if (line_differs(current + i * sizeof(U), shadow + i * sizeof(U))) record(cur, sh, i, i + kPerLine, out, &n);
  }
  record(cur, sh, full, count, out, &n);
  return n;
}

}  // namespace

void diff_and_update(const uint8_t* current, uint8_t* shadow, uint64_t count, unsigned elem_size, DiffResult* out) {
  out->count = 0;
  switch (elem_size) {
    case 1: out->count = diff_lines<uint8_t>(current, shadow, count, out); break;
    case 2: out->count = diff_lines<uint16_t>(current, shadow, count, out); break;
    case 4: out->count = diff_lines<uint32_t>(current, shadow, count, out); break;
    case 8: out->count = diff_lines<uint64_t>(current, shadow, count, out); break;
    default: break;
  }
}

void diff_and_update_reference(const uint8_t* current, uint8_t* shadow, uint64_t count, unsigned elem_size,
                               DiffResult* out) {
  size_t n = 0;
  for (uint64_t j = 0; j < count; ++j) {
    uint64_t c = 0;
    uint64_t s = 0;
    std::memcpy(&c, current + j * elem_size, elem_size);
    std::memcpy(&s, shadow + j * elem_size, elem_size);
    if (c != s) {
      make_room(out, n, 1);
      out->positions.data()[n] = j;
      out->old_bits.data()[n] = s;
      out->new_bits.data()[n] = c;
      std::memcpy(shadow + j * elem_size, current + j * elem_size, elem_size);
      ++n;
    }
  }
  out->count = n;
}

}  // namespace deltacast
