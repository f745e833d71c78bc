#include "support/codec_harness.h"

namespace deltacast::testing {

std::vector<std::span<const uint8_t>> bucket_spans(const std::vector<std::vector<uint8_t>>& buckets) {
  std::vector<std::span<const uint8_t>> spans;
  for (const auto& b : buckets) spans.emplace_back(b);
  return spans;
}

Result<EncodedVersion> encode_delta(const Manifest& manifest, const CodecOptions& options, const TensorSet& base,
                                    const TensorSet& current, uint64_t base_version, uint64_t target_version,
                                    std::span<const std::vector<uint64_t>> cuts) {
  DC_ASSIGN_OR_RETURN(DeltaEncoder encoder, DeltaEncoder::create(manifest, options, cuts));
  DC_ASSIGN_OR_RETURN(Shadow shadow, Shadow::copy_of(manifest, base.views(), base_version));
  const auto views = current.views();
  return encoder.encode_delta(views, shadow, target_version);
}

Status verify_and_apply(const DeltaApplier& applier, const std::vector<std::vector<uint8_t>>& buckets,
                        std::optional<uint64_t> held_version, const TensorSet& target) {
  const auto spans = bucket_spans(buckets);
  DC_ASSIGN_OR_RETURN(VersionChunks version, applier.verify(spans, held_version));
  const auto views = target.views();
  return applier.apply(version, views);
}

}  // namespace deltacast::testing
