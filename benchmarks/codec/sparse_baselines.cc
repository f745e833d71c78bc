#include "codec/sparse_baselines.h"

#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "sparse/value_codec.h"
#include "sparse/zstd_stage.h"

namespace deltacast::bench {

namespace {

double entropy_bits(const std::unordered_map<uint64_t, uint64_t>& histogram, uint64_t total) {
  double bits = 0;
  for (const auto& [symbol, count] : histogram) {
    const double p = static_cast<double>(count) / static_cast<double>(total);
    bits -= static_cast<double>(count) * std::log2(p);
  }
  return bits;
}

}  // namespace

BaselineSizes measure_baselines(std::span<const TensorView> before, std::span<const TensorView> after) {
  BaselineSizes sizes;
  // SparseRL-Sync ships per tensor an int32 index tensor and a value tensor; zstd runs over those bytes.
  std::vector<uint8_t> indices, values;
  std::unordered_map<uint64_t, uint64_t> gaps, steps;
  for (size_t t = 0; t < after.size(); ++t) {
    const unsigned size = dtype_size(after[t].dtype);
    const unsigned bits = size * 8;
    const uint8_t* a = before[t].bytes();
    const uint8_t* b = after[t].bytes();
    uint64_t next = 0;
    for (uint64_t i = 0; i < after[t].numel; ++i) {
      if (std::memcmp(a + i * size, b + i * size, size) == 0) continue;
      uint64_t old_bits = 0, new_bits = 0;
      std::memcpy(&old_bits, a + i * size, size);
      std::memcpy(&new_bits, b + i * size, size);
      const auto index = static_cast<uint32_t>(i);
      indices.insert(indices.end(), reinterpret_cast<const uint8_t*>(&index),
                     reinterpret_cast<const uint8_t*>(&index) + 4);
      values.insert(values.end(), b + i * size, b + (i + 1) * size);
      ++gaps[i - next];
      next = i + 1;
      ++steps[dtype_is_floating(after[t].dtype) ? ulp_encode(old_bits, new_bits, bits) : new_bits];
      ++sizes.changed;
    }
  }
  sizes.int32_bytes = indices.size() + values.size();
  indices.insert(indices.end(), values.begin(), values.end());
  sizes.int32_zstd1_bytes = indices.empty() ? 0 : zstd_compressed_size(indices, 1);
  const double bits = entropy_bits(gaps, sizes.changed) + entropy_bits(steps, sizes.changed);
  sizes.entropy_bound_bytes = static_cast<uint64_t>(std::ceil(bits / 8));
  return sizes;
}

}  // namespace deltacast::bench
