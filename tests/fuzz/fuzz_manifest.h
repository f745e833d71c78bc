// The manifest the decoder fuzzer decodes against: small tensors of several
// widths, float and integer, so every decode path is reachable.
#pragma once

#include "core/manifest.h"

namespace deltacast::fuzz {

inline Manifest fuzz_manifest() {
  return Manifest::create({{"bf16", DType::kBF16, {4096}},
                           {"f32", DType::kF32, {300}},
                           {"i8", DType::kI8, {1000}},
                           {"f64", DType::kF64, {50}},
                           {"one", DType::kU8, {1}}})
      .value();
}

// Chunk size the seed corpus is encoded with (several chunks per tensor).
inline constexpr uint64_t kFuzzChunkBytes = 2048;

}  // namespace deltacast::fuzz
