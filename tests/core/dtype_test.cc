#include "core/dtype.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

TEST(DType, SizesAndKinds) {
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kF8E5M2), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_TRUE(dtype_is_floating(DType::kF8E4M3));
  EXPECT_FALSE(dtype_is_floating(DType::kI32));
  EXPECT_FALSE(dtype_is_floating(DType::kBool));
}

TEST(DType, NamesRoundTrip) {
  for (DType d : kAllDTypes) {
    auto parsed = parse_dtype(dtype_name(d));
    ASSERT_TRUE(parsed.ok()) << dtype_name(d);
    EXPECT_EQ(*parsed, d);
    EXPECT_TRUE(dtype_is_valid(static_cast<uint8_t>(d)));
  }
  EXPECT_EQ(*parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_FALSE(parse_dtype("complex64").ok());
  EXPECT_FALSE(dtype_is_valid(0));
  EXPECT_FALSE(dtype_is_valid(200));
}

}  // namespace
}  // namespace deltacast
