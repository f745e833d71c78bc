// A tensor above 2^31 elements: positions are 64-bit everywhere. Uses one
// chunk spanning the whole tensor so in-chunk gaps exceed 2^31 too.
#include <gtest/gtest.h>

#include "support/codec_harness.h"

namespace deltacast {
namespace {

TEST(HugeTensor, AboveTwoToTheThirtyOneElements) {
  const uint64_t n = (uint64_t{1} << 31) + 4099;
  Manifest manifest = testing::make_manifest({{"huge", DType::kI8, {n}}});
  // Three copies only (the producer's tensor, its shadow, the consumer's): each is 2 GiB.
  testing::TensorSet current(manifest), consumer(manifest);
  auto shadow = Shadow::copy_of(manifest, consumer.views(), 1);
  ASSERT_TRUE(shadow.ok());
  DeltaApplier applier(manifest);
  const auto views = current.views();
  // Positions on both sides of 2^31, the first and the last element.
  const std::vector<uint64_t> positions = {
      0, 1, 5, 1u << 20, (uint64_t{1} << 31) - 1, uint64_t{1} << 31, (uint64_t{1} << 31) + 1, n - 2, n - 1};
  uint64_t version = 1;
  for (bool one_chunk : {true, false}) {
    SCOPED_TRACE(one_chunk ? "one chunk over the whole tensor: in-chunk gaps above 2^31" : "default chunking");
    for (uint64_t p : positions) testing::set_element_bits(current.tensors[0], p, one_chunk ? 0x5a : 0x33);
    CodecOptions options;
    options.value_codec = ValueCodec::kRaw;
    if (one_chunk) options.chunk_bytes = uint64_t{4} << 30;
    auto encoder = DeltaEncoder::create(manifest, options);
    ASSERT_TRUE(encoder.ok());
    auto delta = encoder->encode_delta(views, *shadow, version + 1);
    ASSERT_TRUE(delta.ok());
    EXPECT_EQ(delta->stats.changed, positions.size());
    EXPECT_LT(delta->stats.wire_bytes, 2000u);
    Status s = testing::verify_and_apply(applier, delta->buckets, version, consumer);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(consumer.same_bits(current));
    EXPECT_TRUE(consumer.guards_intact());
    ++version;
  }
}

}  // namespace
}  // namespace deltacast
