// Element types deltacast moves. The codec only cares about an element's
// width and whether its bit pattern is a float (for the `ulp` value codec).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace deltacast {

// The numeric values are part of the wire and manifest formats: never renumber.
enum class DType : uint8_t {
  kF64 = 1,
  kF32 = 2,
  kF16 = 3,
  kBF16 = 4,
  kF8E4M3 = 5,  // "fn" variant: no infinities, NaN = S.1111.111
  kF8E5M2 = 6,
  kI8 = 7,
  kI16 = 8,
  kI32 = 9,
  kI64 = 10,
  kU8 = 11,
  kBool = 12,
};

inline constexpr DType kAllDTypes[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                                       DType::kF8E4M3, DType::kF8E5M2, DType::kI8,  DType::kI16,
                                       DType::kI32,    DType::kI64,    DType::kU8,  DType::kBool};

// Width of one element in bytes (1, 2, 4 or 8).
uint32_t dtype_size(DType dtype);
bool dtype_is_floating(DType dtype);
// True when `code` names a known dtype (for validating untrusted bytes).
bool dtype_is_valid(uint8_t code);
// Short lowercase name: "bf16", "f8e4m3", "i32", ...
std::string_view dtype_name(DType dtype);
// Accepts the short names and common aliases ("bfloat16", "float32", "int64").
Result<DType> parse_dtype(std::string_view name);

}  // namespace deltacast
