// float32 -> narrow float conversion with round-to-nearest-even, as the
// trainer's cast to the published dtype does it (bf16, f16, fp8 e4m3fn and
// e5m2). Returns the target's bit pattern in the low bits.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace deltacast {

// `dtype` must be one of kBF16, kF16, kF8E4M3, kF8E5M2, kF32 (identity).
uint32_t round_f32_to(float x, DType dtype);

// round_f32_to over an array: `out` holds `in.size()` elements of `dtype`. bf16 (what traces
// publish by default) takes a branch-free path the compiler vectorizes, bit for bit the same.
void round_f32s_to(std::span<const float> in, void* out, DType dtype);

// The value of a narrow float's bit pattern (exact: every narrow value is a double).
double narrow_float_value(uint32_t bits, DType dtype);

}  // namespace deltacast
