// Reproducible random bytes for tests: `n` of them from a Mersenne twister seeded with `seed`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace deltacast::testing {

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

}  // namespace deltacast::testing
