#include "sparse/diff.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

namespace deltacast {
namespace {

struct Case {
  unsigned elem_size;
  uint64_t count;
  double density;
};

TEST(Diff, FastPathEqualsReferenceLoop) {
  std::mt19937_64 rng(6);
  std::vector<Case> cases;
  for (unsigned size : {1u, 2u, 4u, 8u}) {
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{31}, uint64_t{64}, uint64_t{1001}, uint64_t{100003}}) {
      for (double density : {0.0, 0.001, 0.01, 0.3, 1.0}) cases.push_back({size, count, density});
    }
  }
  for (DiffPath path : {DiffPath::kBest, DiffPath::kPortable})
    for (const Case& c : cases) {
      const size_t bytes = c.count * c.elem_size;
      std::vector<uint8_t> shadow(bytes), current(bytes);
      for (auto& b : shadow) b = static_cast<uint8_t>(rng());
      current = shadow;
      std::bernoulli_distribution change(c.density);
      for (uint64_t i = 0; i < c.count; ++i) {
        if (change(rng)) {
          // Flip one random bit: the smallest possible difference, incl. sign bits (-0.0 vs +0.0).
          current[i * c.elem_size + rng() % c.elem_size] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
      }
      std::vector<uint8_t> shadow_fast = shadow, shadow_ref = shadow;
      DiffResult fast, ref;
      diff_and_update(current.data(), shadow_fast.data(), c.count, c.elem_size, &fast, path);
      diff_and_update_reference(current.data(), shadow_ref.data(), c.count, c.elem_size, &ref);
      SCOPED_TRACE(testing::Message() << (path == DiffPath::kBest ? "best path" : "portable path") << " size "
                                      << c.elem_size << " count " << c.count << " density " << c.density);
      ASSERT_EQ(fast.count, ref.count);
      for (size_t k = 0; k < fast.count; ++k) {
        ASSERT_EQ(fast.positions.data()[k], ref.positions.data()[k]);
        ASSERT_EQ(fast.old_bits.data()[k], ref.old_bits.data()[k]);
        ASSERT_EQ(fast.new_bits.data()[k], ref.new_bits.data()[k]);
      }
      EXPECT_EQ(shadow_fast, current) << "shadow must become the current version";
      EXPECT_EQ(shadow_ref, current);
    }
}

TEST(Diff, ComparesBitsNotFloatValues) {
  // NaN == NaN bitwise (no change), -0.0 vs +0.0 is a change, different NaN payloads are a change.
  const float nan_a = std::bit_cast<float>(0x7fc00001u);
  const float nan_b = std::bit_cast<float>(0x7fc00002u);
  const float denormal_1 = std::bit_cast<float>(1u);
  const float denormal_2 = std::bit_cast<float>(2u);
  std::vector<float> shadow = {nan_a, 0.0f, nan_a, denormal_1, 1.0f};
  std::vector<float> current = {nan_a, -0.0f, nan_b, denormal_2, 1.0f};
  DiffResult out;
  diff_and_update(reinterpret_cast<const uint8_t*>(current.data()), reinterpret_cast<uint8_t*>(shadow.data()), 5, 4,
                  &out);
  ASSERT_EQ(out.count, 3u);
  EXPECT_EQ(out.positions.data()[0], 1u);
  EXPECT_EQ(out.positions.data()[1], 2u);
  EXPECT_EQ(out.positions.data()[2], 3u);
  EXPECT_EQ(std::memcmp(shadow.data(), current.data(), sizeof(float) * 5), 0);
}

}  // namespace
}  // namespace deltacast
