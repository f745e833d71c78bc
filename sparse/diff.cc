#include "sparse/diff.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/byte_io.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Records the elements of one line flagged in `byte_mask` (one bit per byte, every byte of a
// changed element set) and copies the line into the shadow.
template <typename U>
inline void record_line(const uint8_t* cur, uint8_t* shadow, uint64_t line_start, uint64_t byte_mask, DiffResult* out,
                        size_t* n) {
  make_room(out, *n, kLineBytes / sizeof(U));
  uint64_t* pos = out->positions.data();
  uint64_t* old_bits = out->old_bits.data();
  uint64_t* new_bits = out->new_bits.data();
  constexpr uint64_t kLaneMask = sizeof(U) == 8 ? 0xff : (uint64_t{1} << sizeof(U)) - 1;
  while (byte_mask != 0) {
    const unsigned byte = static_cast<unsigned>(std::countr_zero(byte_mask));
    const unsigned lane = byte / sizeof(U);
    pos[*n] = line_start + lane;
    old_bits[*n] = load_le<U>(shadow + lane * sizeof(U));
    new_bits[*n] = load_le<U>(cur + lane * sizeof(U));
    ++*n;
    byte_mask &= ~(kLaneMask << (lane * sizeof(U)));
  }
  std::memcpy(shadow, cur, kLineBytes);
}

// Portable path: per 8-byte word, a lane is changed when any of its bytes differ.
template <typename U>
uint64_t line_byte_mask_portable(const uint8_t* a, const uint8_t* b) {
  uint64_t mask = 0;
  for (unsigned w = 0; w < kLineBytes / 8; ++w) {
    const uint64_t x = load_le<uint64_t>(a + 8 * w) ^ load_le<uint64_t>(b + 8 * w);
    if (x == 0) continue;
    for (unsigned lane = 0; lane < 8 / sizeof(U); ++lane) {
      const uint64_t lane_bits =
          sizeof(U) == 8 ? x : (x >> (lane * 8 * sizeof(U))) & ((uint64_t{1} << (8 * sizeof(U))) - 1);
      if (lane_bits != 0) {
        constexpr uint64_t kLaneMask = sizeof(U) == 8 ? 0xff : (uint64_t{1} << sizeof(U)) - 1;
        mask |= kLaneMask << (8 * w + lane * sizeof(U));
      }
    }
  }
  return mask;
}

template <typename U>
size_t diff_portable(const uint8_t* cur, uint8_t* shadow, uint64_t lines, DiffResult* out, size_t n) {
  for (uint64_t l = 0; l < lines; ++l) {
    const uint8_t* c = cur + l * kLineBytes;
    uint8_t* s = shadow + l * kLineBytes;
    uint64_t any = 0;
    for (unsigned w = 0; w < kLineBytes / 8; ++w) any |= load_le<uint64_t>(c + 8 * w) ^ load_le<uint64_t>(s + 8 * w);
    if (any == 0) continue;
    record_line<U>(c, s, l * (kLineBytes / sizeof(U)), line_byte_mask_portable<U>(c, s), out, &n);
  }
  return n;
}

#if defined(__x86_64__)
template <typename U>
__attribute__((target("avx2"))) inline __m256i lanes_equal(__m256i a, __m256i b) {
  if constexpr (sizeof(U) == 1) return _mm256_cmpeq_epi8(a, b);
  if constexpr (sizeof(U) == 2) return _mm256_cmpeq_epi16(a, b);
  if constexpr (sizeof(U) == 4) return _mm256_cmpeq_epi32(a, b);
  return _mm256_cmpeq_epi64(a, b);
}

// AVX2 path: two 32-byte compares per line; a clean line costs two loads per side and a test.
template <typename U>
__attribute__((target("avx2"))) size_t diff_avx2(const uint8_t* cur, uint8_t* shadow, uint64_t lines, DiffResult* out,
                                                 size_t n) {
  for (uint64_t l = 0; l < lines; ++l) {
    const uint8_t* c = cur + l * kLineBytes;
    uint8_t* s = shadow + l * kLineBytes;
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32));
    const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i s1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i x = _mm256_or_si256(_mm256_xor_si256(c0, s0), _mm256_xor_si256(c1, s1));
    if (_mm256_testz_si256(x, x)) continue;
    const uint64_t equal_lo = static_cast<uint32_t>(_mm256_movemask_epi8(lanes_equal<U>(c0, s0)));
    const uint64_t equal_hi = static_cast<uint32_t>(_mm256_movemask_epi8(lanes_equal<U>(c1, s1)));
    record_line<U>(c, s, l * (kLineBytes / sizeof(U)), ~(equal_lo | (equal_hi << 32)), out, &n);
  }
  return n;
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif

template <typename U>
size_t diff_typed(const uint8_t* cur, uint8_t* shadow, uint64_t count, DiffResult* out, DiffPath path) {
  const uint64_t lines = count * sizeof(U) / kLineBytes;
  size_t n = 0;
#if defined(__x86_64__)
  if (path == DiffPath::kBest && kHaveAvx2) {
    n = diff_avx2<U>(cur, shadow, lines, out, n);
  } else {
    n = diff_portable<U>(cur, shadow, lines, out, n);
  }
#else
  (void)path;
  n = diff_portable<U>(cur, shadow, lines, out, n);
#endif
  // The tail that does not fill a line, element by element.
  const U* c = reinterpret_cast<const U*>(cur);
  U* s = reinterpret_cast<U*>(shadow);
  for (uint64_t j = lines * kLineBytes / sizeof(U); j < count; ++j) {
    if (c[j] == s[j]) continue;
    make_room(out, n, 1);
    out->positions.data()[n] = j;
    out->old_bits.data()[n] = s[j];
    out->new_bits.data()[n] = c[j];
    s[j] = c[j];
    ++n;
  }
  return n;
}

}  // namespace

void diff_and_update(const uint8_t* current, uint8_t* shadow, uint64_t count, unsigned elem_size, DiffResult* out,
                     DiffPath path) {
  switch (elem_size) {
    case 1:
      out->count = diff_typed<uint8_t>(current, shadow, count, out, path);
      break;
    case 2:
      out->count = diff_typed<uint16_t>(current, shadow, count, out, path);
      break;
    case 4:
      out->count = diff_typed<uint32_t>(current, shadow, count, out, path);
      break;
    case 8:
      out->count = diff_typed<uint64_t>(current, shadow, count, out, path);
      break;
    default:
      out->count = 0;
      break;
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
