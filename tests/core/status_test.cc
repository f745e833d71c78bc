#include "core/status.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("{} is odd", x);
  return x / 2;
}

Result<int> quarter(int x) {
  DC_ASSIGN_OR_RETURN(int h, half(x));
  DC_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  DC_RETURN_IF_ERROR(half(x).status());
  return Status();
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(Status, CarriesCodeAndFormattedMessage) {
  Status s = corrupt("chunk {} bad: {}", 3, "short");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "chunk 3 bad: short");
  EXPECT_EQ(s.to_string(), "CORRUPT: chunk 3 bad: short");
  EXPECT_EQ(s.with_context("bucket 1").message(), "bucket 1: chunk 3 bad: short");
}

TEST(Status, ResultPropagatesThroughMacros) {
  EXPECT_EQ(quarter(8).value(), 2);
  Result<int> r = quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_EQ(check_even(5).code(), StatusCode::kInvalidArgument);
}

TEST(Status, ResultFromOkStatusIsAnError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace deltacast
