// A version is a set of buckets: all of them, once each, for the same
// versions, applied only on the base they were made against; a full sync
// must cover everything, and chunks must not overlap.
#include <gtest/gtest.h>

#include <random>

#include "support/bucket_forge.h"
#include "support/codec_harness.h"

namespace deltacast {
namespace {

using namespace testing::bucket_field;
using testing::TensorSet;

struct Versions {
  Manifest manifest = testing::make_manifest({{"w", DType::kBF16, {80000}}, {"b", DType::kF32, {500}}});
  TensorSet v1{manifest}, v2{manifest}, target{manifest};
  std::vector<std::vector<uint8_t>> delta, full, delta_other;
  DeltaApplier applier{manifest, 1};

  Versions() {
    std::mt19937_64 rng(31);
    testing::fill_random_bits(v1, rng);
    v2.copy_from(v1);
    for (auto& t : v2.tensors) testing::apply_random_changes(t, t.view().numel / 20, rng);
    CodecOptions options;
    options.chunk_bytes = 8192;
    options.bucket_bytes = 4096;
    auto encoder = DeltaEncoder::create(manifest, options);
    auto shadow = Shadow::copy_of(manifest, v1.views(), 1);
    const auto views = v2.views();
    delta = encoder->encode_delta(views, *shadow, 2)->buckets;
    full = encoder->encode_full(views, 2)->buckets;
    // The same change published from another base (3 -> 4).
    auto shadow3 = Shadow::copy_of(manifest, v1.views(), 3);
    delta_other = encoder->encode_delta(views, *shadow3, 4)->buckets;
    target.copy_from(v1);
  }
  Status commit(const std::vector<std::vector<uint8_t>>& buckets, std::optional<uint64_t> held) {
    return testing::verify_and_apply(applier, buckets, held, target);
  }
  bool untouched() const { return target.same_bits(v1) && target.guards_intact(); }
};

TEST(VersionSet, SampleHasSeveralBuckets) {
  Versions v;
  ASSERT_GE(v.delta.size(), 3u);
  ASSERT_TRUE(v.commit(v.delta, 1).ok());
  EXPECT_TRUE(v.target.same_bits(v.v2));
}

TEST(VersionSet, MissingDuplicateOrMixedBucketsAreRejected) {
  Versions v;
  auto missing = v.delta;
  missing.pop_back();
  EXPECT_NE(v.commit(missing, 1).message().find("buckets"), std::string::npos);
  auto duplicate = v.delta;
  duplicate.back() = duplicate.front();
  EXPECT_NE(v.commit(duplicate, 1).message().find("given twice"), std::string::npos);
  auto mixed = v.delta;
  mixed[1] = v.delta_other[1];
  EXPECT_NE(v.commit(mixed, 1).message().find("belongs to version"), std::string::npos);
  EXPECT_FALSE(v.commit({}, 1).ok());
  EXPECT_TRUE(v.untouched());
}

TEST(VersionSet, DeltaNeedsItsExactBase) {
  Versions v;
  Status wrong_base = v.commit(v.delta, 3);
  EXPECT_EQ(wrong_base.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong_base.message().find("version 3 is held"), std::string::npos);
  Status nothing_held = v.commit(v.delta, std::nullopt);
  EXPECT_EQ(nothing_held.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(nothing_held.message().find("full sync is needed"), std::string::npos);
  EXPECT_TRUE(v.untouched());
  // A full sync applies whatever is held.
  EXPECT_TRUE(v.commit(v.full, 17).ok());
  EXPECT_TRUE(v.target.same_bits(v.v2));
}

TEST(VersionSet, ManifestMismatchIsNamed) {
  Versions v;
  Manifest other = testing::make_manifest({{"w", DType::kBF16, {80001}}, {"b", DType::kF32, {500}}});
  DeltaApplier applier(other, 1);
  auto r = applier.verify(testing::bucket_spans(v.delta), 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMismatch);
  EXPECT_NE(r.status().message().find("manifest"), std::string::npos);
}

// Removes chunk `k` from a single-bucket version and re-seals it.
std::vector<uint8_t> drop_chunk(std::vector<uint8_t> bucket, size_t k) {
  size_t at = testing::kFirstChunk;
  for (size_t i = 0; i < k; ++i) at += align_up(ChunkHeader::kBytes + testing::peek<uint64_t>(bucket, at + 48), 8);
  const size_t size = align_up(ChunkHeader::kBytes + testing::peek<uint64_t>(bucket, at + 48), 8);
  bucket.erase(bucket.begin() + static_cast<long>(at), bucket.begin() + static_cast<long>(at + size));
  testing::poke<uint32_t>(bucket, kChunkCount, testing::peek<uint32_t>(bucket, kChunkCount) - 1);
  testing::poke<uint64_t>(bucket, kPayloadBytes, bucket.size() - BucketHeader::kBytes);
  testing::reseal(bucket);
  return bucket;
}

TEST(VersionSet, FullSyncMustCoverEveryElement) {
  Versions v;
  for (size_t b = 0; b < v.full.size(); ++b) {
    if (testing::peek<uint32_t>(v.full[b], kChunkCount) == 0) continue;
    auto forged = v.full;
    forged[b] = drop_chunk(forged[b], 0);
    Status s = v.commit(forged, 1);
    EXPECT_NE(s.message().find("unset"), std::string::npos) << s.to_string();
    EXPECT_TRUE(v.untouched());
  }
}

TEST(VersionSet, OverlappingChunksAreRejected) {
  Versions v;
  // Append a copy of the first chunk to the same bucket.
  auto bucket = v.delta[0];
  const size_t size = align_up(ChunkHeader::kBytes + testing::peek<uint64_t>(bucket, testing::kFirstChunk + 48), 8);
  std::vector<uint8_t> chunk(bucket.begin() + testing::kFirstChunk,
                             bucket.begin() + static_cast<long>(testing::kFirstChunk + size));
  bucket.insert(bucket.end(), chunk.begin(), chunk.end());
  testing::poke<uint32_t>(bucket, kChunkCount, testing::peek<uint32_t>(bucket, kChunkCount) + 1);
  testing::poke<uint64_t>(bucket, kPayloadBytes, bucket.size() - BucketHeader::kBytes);
  testing::reseal(bucket);
  auto forged = v.delta;
  forged[0] = bucket;
  Status s = v.commit(forged, 1);
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.to_string();
  EXPECT_TRUE(v.untouched());
}

TEST(VersionSet, SparseChunkInAFullSyncIsRejected) {
  Versions v;
  auto forged = v.delta;
  for (auto& b : forged) {
    testing::poke<uint32_t>(b, kFlags, kBucketFull);
    testing::poke<uint64_t>(b, kBase, 0);
    testing::reseal(b);
  }
  Status s = v.commit(forged, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(v.untouched());
}

}  // namespace
}  // namespace deltacast
