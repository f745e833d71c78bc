#include "core/manifest.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

Manifest sample() {
  return Manifest::create({{"embed", DType::kBF16, {1000, 64}}, {"norm", DType::kF32, {64}}, {"step", DType::kI64, {}}})
      .value();
}

TEST(Manifest, CountsElementsAndBytes) {
  Manifest m = sample();
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].numel(), 64000u);
  EXPECT_EQ(m[2].numel(), 1u);  // a scalar has one element
  EXPECT_EQ(m.total_elements(), 64000u + 64u + 1u);
  EXPECT_EQ(m.total_bytes(), 128000u + 256u + 8u);
  EXPECT_EQ(m.find("norm"), 1u);
  EXPECT_FALSE(m.find("missing").has_value());
}

TEST(Manifest, HashIsStableAndSensitive) {
  EXPECT_EQ(sample().hash(), sample().hash());
  // Parsing the serialized form gives back the same hash (the golden value lives in format_spec_test).
  EXPECT_EQ(sample().hash(), Manifest::parse(sample().serialize())->hash());
  auto other =
      Manifest::create({{"embed", DType::kBF16, {1000, 64}}, {"norm", DType::kF32, {65}}, {"step", DType::kI64, {}}});
  EXPECT_NE(sample().hash(), other->hash());
  auto renamed =
      Manifest::create({{"embed", DType::kBF16, {1000, 64}}, {"norms", DType::kF32, {64}}, {"step", DType::kI64, {}}});
  EXPECT_NE(sample().hash(), renamed->hash());
}

TEST(Manifest, NamesFirstDifference) {
  Manifest a = sample();
  EXPECT_EQ(a.first_difference(a), "");
  auto b =
      Manifest::create({{"embed", DType::kBF16, {1000, 64}}, {"norm", DType::kF16, {64}}, {"step", DType::kI64, {}}});
  EXPECT_EQ(a.first_difference(*b), "tensor 1 'norm': dtype f32 vs f16");
  auto c = Manifest::create({{"embed", DType::kBF16, {1000, 32}}});
  EXPECT_EQ(a.first_difference(*c), "tensor 0 'embed': shape [1000, 64] vs [1000, 32]");
  auto d = Manifest::create({{"embed", DType::kBF16, {1000, 64}}, {"norm", DType::kF32, {64}}});
  EXPECT_EQ(a.first_difference(*d), "tensor count 3 vs 2: tensor 2 'step' exists only on the first side");
}

TEST(Manifest, RejectsBadSpecs) {
  EXPECT_FALSE(Manifest::create({{"", DType::kF32, {1}}}).ok());
  EXPECT_FALSE(Manifest::create({{"a", DType::kF32, {1}}, {"a", DType::kF32, {2}}}).ok());
  EXPECT_FALSE(Manifest::create({{"a", DType::kF32, {uint64_t{1} << 40, uint64_t{1} << 40}}}).ok());
}

TEST(Manifest, ChecksViews) {
  Manifest m = sample();
  std::vector<uint8_t> a(128000), b(256), c(8);
  std::vector<TensorView> views = {
      {a.data(), DType::kBF16, 64000, {}}, {b.data(), DType::kF32, 64, {}}, {c.data(), DType::kI64, 1, {}}};
  EXPECT_TRUE(m.check_views(views).ok());
  views[1].dtype = DType::kF16;
  EXPECT_EQ(m.check_views(views).code(), StatusCode::kMismatch);
  views[1].dtype = DType::kF32;
  views[0].numel = 10;
  EXPECT_NE(m.check_views(views).message().find("'embed'"), std::string::npos);
  views.pop_back();
  EXPECT_FALSE(m.check_views(views).ok());
}

TEST(Manifest, SerializeParseRoundTripAndRejectsGarbage) {
  Manifest m = sample();
  std::vector<uint8_t> bytes = m.serialize();
  auto back = Manifest::parse(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->tensors(), m.tensors());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(Manifest::parse(std::span(bytes).first(cut)).ok()) << "prefix " << cut;
  }
  std::vector<uint8_t> forged = bytes;
  forged[6] = 0xff;  // tensor count low byte -> 255 tensors in a tiny buffer
  EXPECT_EQ(Manifest::parse(forged).status().code(), StatusCode::kCorrupt);
  bytes.push_back(0);
  EXPECT_FALSE(Manifest::parse(bytes).ok());
}

}  // namespace
}  // namespace deltacast
