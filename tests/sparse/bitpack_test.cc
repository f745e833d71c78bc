#include "sparse/bitpack.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace deltacast {
namespace {

// Bit-at-a-time reference of the documented layout.
std::vector<uint8_t> reference_pack(const std::vector<uint64_t>& values, unsigned width) {
  std::vector<uint8_t> out(packed_bytes(values.size(), width), 0);
  size_t bit = 0;
  for (uint64_t v : values) {
    for (unsigned k = 0; k < width; ++k, ++bit) {
      if ((v >> k) & 1) out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
  return out;
}

TEST(BitPack, MatchesReferenceForEveryWidth) {
  std::mt19937_64 rng(1);
  for (unsigned width = 0; width <= 64; ++width) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{127}, size_t{128}, size_t{333}}) {
      std::vector<uint64_t> values(count);
      for (auto& v : values) v = rng() & low_mask(width);
      std::vector<uint8_t> packed(packed_bytes(count, width) + 3, 0xEE);  // 0xEE: must stay untouched
      pack_bits(values.data(), count, width, packed.data());
      const std::vector<uint8_t> expected = reference_pack(values, width);
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), packed.begin()))
          << "width " << width << " count " << count;
      for (size_t i = expected.size(); i < packed.size(); ++i) ASSERT_EQ(packed[i], 0xEE) << "wrote past the end";
      std::vector<uint64_t> back(count + 1, 0xDEAD);
      // Unpack with exactly the packed bytes available: the tail path must not read further.
      unpack_bits(expected.data(), expected.size(), count, width, back.data());
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(back[i], values[i]) << "width " << width << " i " << i;
      EXPECT_EQ(back[count], 0xDEADu);
    }
  }
}

TEST(BitPack, IgnoresBitsAboveWidth) {
  std::vector<uint64_t> values = {~uint64_t{0}, 0x1234, ~uint64_t{0}};
  std::vector<uint8_t> packed(packed_bytes(3, 4));
  pack_bits(values.data(), 3, 4, packed.data());
  std::vector<uint64_t> back(3);
  unpack_bits(packed.data(), packed.size(), 3, 4, back.data());
  EXPECT_EQ(back, (std::vector<uint64_t>{0xF, 0x4, 0xF}));
}

}  // namespace
}  // namespace deltacast
