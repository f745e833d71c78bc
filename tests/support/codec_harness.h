// Producer -> bytes -> consumer in one process: encodes versions with the
// real encoder and applies them with the real applier, for tests.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "sparse/delta_applier.h"
#include "sparse/delta_encoder.h"
#include "support/test_tensors.h"

namespace deltacast::testing {

// Spans over a version's buckets, as the applier takes them.
std::vector<std::span<const uint8_t>> bucket_spans(const std::vector<std::vector<uint8_t>>& buckets);

// Encodes the delta base -> current (versions base_version -> target_version)
// with a fresh encoder (chunks also cut at `cuts`, plan_chunk_ranges) and a shadow copied from `base`.
Result<EncodedVersion> encode_delta(const Manifest& manifest, const CodecOptions& options, const TensorSet& base,
                                    const TensorSet& current, uint64_t base_version, uint64_t target_version,
                                    std::span<const std::vector<uint64_t>> cuts = {});

// verify() then, only if it passed, apply(): the consumer's commit.
Status verify_and_apply(const DeltaApplier& applier, const std::vector<std::vector<uint8_t>>& buckets,
                        std::optional<uint64_t> held_version, const TensorSet& target);

}  // namespace deltacast::testing
