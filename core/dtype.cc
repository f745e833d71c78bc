#include "core/dtype.h"

#include <array>
#include <utility>

namespace deltacast {

namespace {

struct DTypeInfo {
  DType dtype;
  uint32_t size;
  bool floating;
  std::string_view name;
};

constexpr std::array<DTypeInfo, 12> kInfo = {{
    {DType::kF64, 8, true, "f64"},
    {DType::kF32, 4, true, "f32"},
    {DType::kF16, 2, true, "f16"},
    {DType::kBF16, 2, true, "bf16"},
    {DType::kF8E4M3, 1, true, "f8e4m3"},
    {DType::kF8E5M2, 1, true, "f8e5m2"},
    {DType::kI8, 1, false, "i8"},
    {DType::kI16, 2, false, "i16"},
    {DType::kI32, 4, false, "i32"},
    {DType::kI64, 8, false, "i64"},
    {DType::kU8, 1, false, "u8"},
    {DType::kBool, 1, false, "bool"},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kInfo) {
    if (entry.dtype == dtype) return entry;
  }
  return kInfo[0];  // unreachable for valid enums; callers validate untrusted codes first
}

constexpr std::pair<std::string_view, DType> kAliases[] = {
    {"float64", DType::kF64},        {"double", DType::kF64},
    {"float32", DType::kF32},        {"float", DType::kF32},
    {"float16", DType::kF16},        {"half", DType::kF16},
    {"bfloat16", DType::kBF16},      {"float8_e4m3fn", DType::kF8E4M3},
    {"float8_e5m2", DType::kF8E5M2}, {"int8", DType::kI8},
    {"int16", DType::kI16},          {"int32", DType::kI32},
    {"int64", DType::kI64},          {"uint8", DType::kU8},
};

}  // namespace

uint32_t dtype_size(DType dtype) { return info(dtype).size; }
bool dtype_is_floating(DType dtype) { return info(dtype).floating; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

bool dtype_is_valid(uint8_t code) {
  for (const auto& entry : kInfo) {
    if (static_cast<uint8_t>(entry.dtype) == code) return true;
  }
  return false;
}

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == name) return dtype;
  }
  return invalid_argument("unknown dtype '{}'", name);
}

}  // namespace deltacast
