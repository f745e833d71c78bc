// Value codecs for changed elements.
//
// `raw` stores the new bit pattern. `ulp` stores how far the new value moved
// from the old one, counted in representable values: both bit patterns are
// mapped to an unsigned key whose order is the numeric order (negative floats
// are bit-flipped, positive ones get the sign bit set, so -0.0 and +0.0 are
// neighbours and crossing zero is a small step), the key difference is taken
// modulo 2^w, zigzagged so that small steps either way are small numbers,
// and, since a changed element never has a zero difference, stored minus one.
// Every w-bit pattern (NaN payloads included) maps to a key and back, so the
// code is exact for any pair of values.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/status.h"

namespace deltacast {

// Numeric values are part of the chunk format.
enum class ValueCodec : uint8_t { kRaw = 0, kUlp = 1 };

std::string_view value_codec_name(ValueCodec codec);
Result<ValueCodec> parse_value_codec(std::string_view name);
// `ulp` only applies to floating dtypes; everything else is sent `raw`.
inline ValueCodec effective_value_codec(ValueCodec wanted, DType dtype) {
  return wanted == ValueCodec::kUlp && dtype_is_floating(dtype) ? ValueCodec::kUlp : ValueCodec::kRaw;
}

// All helpers take and return w-bit patterns held in the low bits of a u64.
DC_HOST_DEVICE inline constexpr uint64_t width_mask(unsigned bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

// Negative patterns flip every bit, positive ones only the sign bit. Written
// without branches: weight signs are a coin toss, so a branch would miss half
// the time in the apply loop.
DC_HOST_DEVICE inline constexpr uint64_t float_key(uint64_t pattern, unsigned bits) {
  const uint64_t sign = uint64_t{1} << (bits - 1);
  const uint64_t negative = 0 - (pattern >> (bits - 1));  // all ones for a negative pattern
  return pattern ^ ((negative & width_mask(bits)) | sign);
}

DC_HOST_DEVICE inline constexpr uint64_t float_unkey(uint64_t key, unsigned bits) {
  const uint64_t sign = uint64_t{1} << (bits - 1);
  const uint64_t mask = width_mask(bits);
  const uint64_t positive = 0 - (key >> (bits - 1));  // keys of non-negative values have the top bit set
  return key ^ (mask ^ (positive & (mask ^ sign)));
}

// The stored `ulp` value for old -> new (old != new).
DC_HOST_DEVICE inline constexpr uint64_t ulp_encode(uint64_t old_pattern, uint64_t new_pattern, unsigned bits) {
  const uint64_t mask = width_mask(bits);
  const uint64_t delta = (float_key(new_pattern, bits) - float_key(old_pattern, bits)) & mask;
  // Zigzag in w bits: sign-extend the w-bit delta, then (d << 1) ^ (d >> (w - 1)).
  const unsigned shift = 64 - bits;
  const int64_t d = static_cast<int64_t>(delta << shift) >> shift;
  const uint64_t zz = ((static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63)) & mask;
  return zz - 1;
}

// Largest stored `ulp` value that is valid for a w-bit type (zigzag 2^w - 1).
DC_HOST_DEVICE inline constexpr uint64_t ulp_max_stored(unsigned bits) { return width_mask(bits) - 1; }

// The new pattern from the old one and a stored value <= ulp_max_stored(bits).
DC_HOST_DEVICE inline constexpr uint64_t ulp_decode(uint64_t old_pattern, uint64_t stored, unsigned bits) {
  const uint64_t mask = width_mask(bits);
  const uint64_t zz = stored + 1;
  const uint64_t delta = (zz >> 1) ^ (0 - (zz & 1));
  return float_unkey((float_key(old_pattern, bits) + delta) & mask, bits);
}

}  // namespace deltacast
