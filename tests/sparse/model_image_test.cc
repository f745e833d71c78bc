// The model image (a full version's bytes): pack and unpack against a
// reference written longhand (tensor after tensor, memcpy each), on models
// with empty, tiny and multi-piece tensors and on non-finite values.
#include "sparse/model_image.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/aligned_buffer.h"
#include "core/hash.h"

namespace deltacast {
namespace {

struct Model {
  Manifest manifest;
  std::vector<AlignedBuffer> storage;
  std::vector<TensorView> views;
};

Model make_model(const std::vector<std::pair<DType, uint64_t>>& shapes, uint64_t seed) {
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < shapes.size(); ++i) specs.push_back({fmt::format("t{}", i), shapes[i].first, {shapes[i].second}});
  Model m{Manifest::create(specs).value(), {}, {}};
  std::mt19937_64 rng(seed);
  for (const auto& spec : m.manifest.tensors()) {
    AlignedBuffer& b = m.storage.emplace_back(spec.nbytes());
    for (size_t i = 0; i < b.size(); ++i) b.data()[i] = static_cast<uint8_t>(rng());
    m.views.push_back(TensorView{b.data(), spec.dtype, spec.numel(), Device{}});
  }
  return m;
}

std::vector<uint8_t> reference_image(const Model& m) {
  std::vector<uint8_t> image;
  for (const auto& v : m.views) image.insert(image.end(), v.bytes(), v.bytes() + v.nbytes());
  return image;
}

// Empty tensors, odd sizes, one tensor of several 4 MiB pieces and one of exactly one piece.
const std::vector<std::pair<DType, uint64_t>> kMixedShapes = {
    {DType::kBF16, 0}, {DType::kF32, 7}, {DType::kBF16, (5 << 20) + 3}, {DType::kU8, 0}, {DType::kU8, 4 << 20}, {DType::kF64, 1}};

TEST(ModelImage, PackAndUnpackMatchTheReference) {
  ThreadPool pool(3);
  const Model m = make_model(kMixedShapes, 1);
  const ModelImage image(m.manifest);
  const auto want = reference_image(m);
  ASSERT_EQ(image.bytes(), want.size());
  ASSERT_EQ(image.bytes(), m.manifest.total_bytes());
  std::vector<uint8_t> packed(image.bytes() + 2, 0xEE);
  const std::vector<uint64_t> leaves = image.pack(m.views, packed.data() + 1, pool);
  EXPECT_EQ(leaves, content_hash_leaves(want.data(), want.size(), pool));
  EXPECT_EQ(packed.front(), 0xEE);
  EXPECT_EQ(packed.back(), 0xEE);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), packed.begin() + 1));
  uint64_t at = 0;
  for (size_t i = 0; i < m.manifest.size(); ++i) {
    EXPECT_EQ(image.offset(i), at) << i;
    at += m.manifest[i].nbytes();
  }

  Model target = make_model(kMixedShapes, 2);
  image.unpack(packed.data() + 1, target.views, pool);
  for (size_t i = 0; i < m.views.size(); ++i) {
    EXPECT_EQ(std::memcmp(target.views[i].data, m.views[i].data, m.views[i].nbytes()), 0) << i;
  }
}

TEST(ModelImage, NonFiniteValuesAndSignedZerosTravelBitForBit) {
  ThreadPool pool(2);
  Model m = make_model({{DType::kF32, 6}, {DType::kBF16, 5}}, 3);
  const float f32[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, std::numeric_limits<float>::denorm_min(),
                       -std::numeric_limits<float>::infinity(), std::nanf("0x2a"), 1.0f};
  std::memcpy(m.views[0].data, f32, sizeof(f32));
  const uint16_t bf16[] = {0x7fc1, 0x8000, 0x0001, 0xff80, 0x7f81};
  std::memcpy(m.views[1].data, bf16, sizeof(bf16));
  const ModelImage image(m.manifest);
  std::vector<uint8_t> packed(image.bytes());
  image.pack(m.views, packed.data(), pool);
  Model target = make_model({{DType::kF32, 6}, {DType::kBF16, 5}}, 4);
  image.unpack(packed.data(), target.views, pool);
  EXPECT_EQ(std::memcmp(target.views[0].data, f32, sizeof(f32)), 0);
  EXPECT_EQ(std::memcmp(target.views[1].data, bf16, sizeof(bf16)), 0);
}

TEST(ModelImage, AModelOfEmptyTensorsIsAnEmptyImage) {
  ThreadPool pool(2);
  Model m = make_model({{DType::kBF16, 0}, {DType::kF32, 0}}, 5);
  const ModelImage image(m.manifest);
  EXPECT_EQ(image.bytes(), 0u);
  const std::vector<uint64_t> leaves = image.pack(m.views, nullptr, pool);
  ASSERT_EQ(leaves.size(), 1u);
  EXPECT_EQ(content_hash_from_leaves(leaves.data(), 1, 0), content_hash(nullptr, 0));
  image.unpack(nullptr, m.views, pool);
}

// Leaves that straddle many small tensors, empty ones among them, and a stretch boundary.
TEST(ModelImage, PackHashesEveryLeafOfTheImageWhateverTensorsItSpans) {
  ThreadPool pool(3);
  std::mt19937_64 rng(6);
  std::vector<std::pair<DType, uint64_t>> shapes;
  for (int i = 0; i < 60; ++i) {
    const uint64_t n = rng() % 5 == 0 ? 0 : 1 + rng() % 150000;
    shapes.push_back({i % 3 == 0 ? DType::kU8 : DType::kBF16, n});
  }
  const Model m = make_model(shapes, 7);
  const ModelImage image(m.manifest);
  ASSERT_GT(image.bytes(), uint64_t{4} << 20);  // more than one stretch
  const auto want = reference_image(m);
  std::vector<uint8_t> packed(image.bytes());
  const std::vector<uint64_t> leaves = image.pack(m.views, packed.data(), pool);
  EXPECT_EQ(packed, want);
  EXPECT_EQ(leaves, content_hash_leaves(want.data(), want.size(), pool));
  EXPECT_EQ(content_hash_from_leaves(leaves.data(), leaves.size(), want.size()), content_hash(want.data(), want.size()));
}

TEST(ModelImage, ATensorAboveTwoToTheThirtyOneElements) {
  ThreadPool pool(2);
  const uint64_t n = (uint64_t{1} << 31) + 4099;
  auto manifest = Manifest::create({{"small", DType::kBF16, {3}}, {"huge", DType::kI8, {n}}}).value();
  AlignedBuffer small(6), huge(n), image_memory(n + 6), small_out(6), huge_out(n);
  const std::vector<uint64_t> positions = {0, 1, (uint64_t{1} << 31) - 1, uint64_t{1} << 31, (uint64_t{1} << 31) + 1, n - 1};
  for (size_t k = 0; k < positions.size(); ++k) huge.data()[positions[k]] = static_cast<uint8_t>(0x40 + k);
  for (int i = 0; i < 6; ++i) small.data()[i] = static_cast<uint8_t>(i + 1);
  const ModelImage image(manifest);
  ASSERT_EQ(image.bytes(), n + 6);
  ASSERT_EQ(image.offset(1), 6u);
  const std::vector<uint64_t> leaves =
      image.pack(std::vector<TensorView>{{small.data(), DType::kBF16, 3, {}}, {huge.data(), DType::kI8, n, {}}},
                 image_memory.data(), pool);
  EXPECT_EQ(std::memcmp(image_memory.data() + 6, huge.data(), n), 0);
  EXPECT_EQ(leaves, content_hash_leaves(image_memory.data(), n + 6, pool));
  image.unpack(image_memory.data(),
               std::vector<TensorView>{{small_out.data(), DType::kBF16, 3, {}}, {huge_out.data(), DType::kI8, n, {}}},
               pool);
  EXPECT_EQ(std::memcmp(small_out.data(), small.data(), 6), 0);
  for (size_t k = 0; k < positions.size(); ++k) EXPECT_EQ(huge_out.data()[positions[k]], 0x40 + k) << positions[k];
  EXPECT_EQ(std::memcmp(huge_out.data(), huge.data(), n), 0);
}

}  // namespace
}  // namespace deltacast
