#include "sparse/trace/float_rounding.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace deltacast {

namespace {

struct Format {
  int exp_bits;
  int man_bits;
  bool has_inf;  // false for e4m3fn: the all-ones exponent is a normal binade, only S.1111.111 is NaN
};

Format format_of(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return {8, 7, true};
    case DType::kF16:
      return {5, 10, true};
    case DType::kF8E4M3:
      return {4, 3, false};
    case DType::kF8E5M2:
      return {5, 2, true};
    default:
      return {8, 23, true};
  }
}

}  // namespace

uint32_t round_f32_to(float x, DType dtype) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (dtype == DType::kF32) return u;
  const Format f = format_of(dtype);
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint32_t sign = (u >> 31) << (f.exp_bits + f.man_bits);
  const uint32_t exp_all_ones = (1u << f.exp_bits) - 1;
  const uint32_t man_mask = (1u << f.man_bits) - 1;
  const uint32_t nan_bits =
      f.has_inf ? (exp_all_ones << f.man_bits) | (1u << (f.man_bits - 1)) : (exp_all_ones << f.man_bits) | man_mask;
  const uint32_t exponent = (u >> 23) & 0xff;
  const uint32_t mantissa = u & 0x7fffff;
  if (exponent == 0xff) {
    if (mantissa != 0 || !f.has_inf) return sign | nan_bits;
    return sign | (exp_all_ones << f.man_bits);
  }
  // |x| = mant24 * 2^(unbiased - 23)
  const uint64_t mant24 = exponent == 0 ? mantissa : (mantissa | 0x800000u);
  const int unbiased = exponent == 0 ? -126 : static_cast<int>(exponent) - 127;
  const int min_exp = 1 - bias;
  const int shift = 23 - f.man_bits + (unbiased < min_exp ? min_exp - unbiased : 0);
  uint64_t q = 0;
  if (shift < 40) {
    q = mant24 >> shift;
    const uint64_t rem = mant24 & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // q holds the implicit bit when the result is normal, so adding it to the exponent field one
  // below the effective exponent lands every case right: a subnormal result (q below the implicit
  // bit) keeps exponent 0, and a mantissa that rounded up to 2.0 carries into the next binade.
  const int effective_exp = unbiased < min_exp ? min_exp : unbiased;
  const uint32_t bits = (static_cast<uint32_t>(effective_exp + bias - 1) << f.man_bits) + static_cast<uint32_t>(q);
  // Overflow: past the largest finite value goes to infinity, or NaN where there is none.
  const uint32_t max_finite = f.has_inf ? ((exp_all_ones << f.man_bits) - 1) : (nan_bits - 1);
  if (bits > max_finite) return sign | (f.has_inf ? (exp_all_ones << f.man_bits) : nan_bits);
  return sign | bits;
}

void round_f32s_to(std::span<const float> in, void* out, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      if (!in.empty()) std::memcpy(out, in.data(), in.size_bytes());
      return;
    case DType::kBF16: {
      // bf16 is f32's top half, with the same exponent range: rounding to nearest even is adding
      // just under half of the dropped half (and its parity) and dropping it, which also carries a
      // mantissa into the next binade and past the largest finite value to infinity. Only NaN
      // differs: it becomes the quiet NaN round_f32_to gives, keeping its sign.
      auto* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < in.size(); ++i) {
        const uint32_t u = std::bit_cast<uint32_t>(in[i]);
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
        o[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
      }
      return;
    }
    default:
      break;
  }
  if (dtype_size(dtype) == 2) {
    auto* o = static_cast<uint16_t*>(out);
    for (size_t i = 0; i < in.size(); ++i) o[i] = static_cast<uint16_t>(round_f32_to(in[i], dtype));
  } else {
    auto* o = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < in.size(); ++i) o[i] = static_cast<uint8_t>(round_f32_to(in[i], dtype));
  }
}

double narrow_float_value(uint32_t bits, DType dtype) {
  if (dtype == DType::kF32) return std::bit_cast<float>(bits);
  const Format f = format_of(dtype);
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint32_t man_mask = (1u << f.man_bits) - 1;
  const uint32_t exp_all_ones = (1u << f.exp_bits) - 1;
  const bool negative = (bits >> (f.exp_bits + f.man_bits)) & 1;
  const uint32_t e = (bits >> f.man_bits) & exp_all_ones;
  const uint32_t m = bits & man_mask;
  double v;
  if (e == exp_all_ones && (f.has_inf || m == man_mask)) {
    v = (f.has_inf && m == 0) ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(m | (1u << f.man_bits)), static_cast<int>(e) - bias - f.man_bits);
  }
  return negative ? -v : v;
}

}  // namespace deltacast
