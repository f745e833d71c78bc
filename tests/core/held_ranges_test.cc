// Held ranges: merged and checked declarations, intersection against a scan, edges, and the
// class hash; untrusted declarations refused naming the tensor.
#include "core/held_ranges.h"

#include <gtest/gtest.h>

#include <random>

namespace deltacast {
namespace {

Manifest two_tensors() { return Manifest::create({{"a", DType::kBF16, {100}}, {"b", DType::kF32, {10, 5}}}).value(); }

TEST(HeldRanges, RangesAreSortedMergedAndChecked) {
  auto held = HeldRanges::create(two_tensors(), {{1, 10, 20}, {0, 50, 60}, {0, 5, 10}, {0, 8, 30}, {0, 30, 31}});
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(std::vector<HeldRange>(held->ranges().begin(), held->ranges().end()),
            (std::vector<HeldRange>{{0, 5, 31}, {0, 50, 60}, {1, 10, 20}}));
  EXPECT_EQ(held->held_elements(), 26u + 10u + 10u);
  EXPECT_EQ(held->edges(2), (std::vector<std::vector<uint64_t>>{{5, 31, 50, 60}, {10, 20}}));
  const auto refused = [](std::vector<HeldRange> ranges, const std::string& says) {
    auto h = HeldRanges::create(two_tensors(), std::move(ranges));
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.status().message().find(says), std::string::npos) << h.status().to_string();
  };
  refused({{1, 40, 51}}, "tensor 'b'");
  refused({{0, 7, 7}}, "tensor 'a'");
  refused({{2, 0, 1}}, "tensor 2");
  refused(std::vector<HeldRange>(HeldRanges::kMaxRanges + 1, {0, 0, 1}), "at most");
}

TEST(HeldRanges, IntersectsFindsWhatAScanFinds) {
  std::mt19937_64 rng(61);
  const Manifest m = two_tensors();
  for (int round = 0; round < 100; ++round) {
    std::vector<HeldRange> ranges;
    for (int k = 0; k < 6; ++k) {
      const uint32_t t = rng() % 2;
      const uint64_t n = m[t].numel();
      const uint64_t begin = rng() % n;
      ranges.push_back({t, begin, begin + 1 + rng() % (n - begin)});
    }
    auto held = HeldRanges::create(m, ranges);
    ASSERT_TRUE(held.ok());
    for (int q = 0; q < 40; ++q) {
      const uint32_t t = rng() % 2;
      const uint64_t begin = rng() % m[t].numel();
      const uint64_t end = begin + rng() % (m[t].numel() - begin + 1);
      bool want = false;
      for (const HeldRange& r : ranges) want |= begin < end && r.tensor == t && r.begin < end && begin < r.end;
      EXPECT_EQ(held->intersects(t, begin, end), want) << "[" << begin << ", " << end << ") of " << t;
    }
  }
}

TEST(HeldRanges, EqualHoldingsHashEqual) {
  const auto a = HeldRanges::create(two_tensors(), {{0, 0, 10}, {0, 10, 20}}).value();
  const auto b = HeldRanges::create(two_tensors(), {{0, 0, 20}}).value();
  const auto c = HeldRanges::create(two_tensors(), {{0, 0, 21}}).value();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  // From a layout: a column view holds one range per row.
  auto layout = Layout::resolve({{"b", DType::kF32, {10, 5}}}, {{"cols", {{"b", false, 1, 1, 3}}}});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(HeldRanges::of(*layout).ranges().size(), 10u);
  EXPECT_EQ(HeldRanges::of(*layout).held_elements(), 20u);
}

}  // namespace
}  // namespace deltacast
