// What other encodings would send for the same delta, computed from the old
// and new tensors: SparseRL-Sync's raw format (int32 index + raw value per
// changed element), that format through zstd level 1, and the empirical
// entropy of the gaps and value steps (a bound no per-symbol coder beats).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor_view.h"

namespace deltacast::bench {

struct BaselineSizes {
  uint64_t changed = 0;
  uint64_t int32_bytes = 0;
  uint64_t int32_zstd1_bytes = 0;
  uint64_t entropy_bound_bytes = 0;
};

// `before` and `after` are the same tensors at two versions.
BaselineSizes measure_baselines(std::span<const TensorView> before, std::span<const TensorView> after);

}  // namespace deltacast::bench
