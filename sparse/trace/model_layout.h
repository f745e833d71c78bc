// Tensor shapes of a transformer-like model of a given total size, so that
// tests and benchmarks see realistic tensor counts and sizes (a few large
// matrices, many norm vectors) rather than one flat array.
#pragma once

#include <cstdint>
#include <vector>

#include "core/manifest.h"

namespace deltacast {

// Returns tensors whose element counts add up to exactly `total_elements`:
// an embedding, L layers of attention (q, k, v, o: h x h), MLP (up: 4h x h,
// down: h x 4h) and two norms (h), a final norm, and an output head that
// takes the remainder. The hidden size grows with the model.
std::vector<TensorSpec> transformer_layout(uint64_t total_elements, DType dtype);

}  // namespace deltacast
