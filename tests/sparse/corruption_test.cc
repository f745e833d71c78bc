// Untrusted buckets: byte flips, truncations and forged fields must all be
// rejected with an error, leaving the target exactly as it was; forged bytes
// that happen to decode must still never write outside the target.
#include <gtest/gtest.h>

#include <random>

#include "support/bucket_forge.h"
#include "support/codec_harness.h"

namespace deltacast {
namespace {

using namespace testing::bucket_field;
using namespace testing::chunk_field;
using testing::kFirstChunk;
using testing::peek;
using testing::poke;
using testing::reseal;
using testing::TensorSet;

// A version with sparse ulp, sparse raw, dense and zstd chunks spread over several buckets.
struct Sample {
  Manifest manifest = testing::make_manifest(
      {{"w", DType::kBF16, {40000}}, {"ids", DType::kI32, {3000}}, {"dense", DType::kF32, {1500}}});
  TensorSet base{manifest}, current{manifest}, target{manifest};
  std::vector<std::vector<uint8_t>> buckets;

  explicit Sample(int zstd) {
    std::mt19937_64 rng(21);
    testing::fill_random_bits(base, rng);
    current.copy_from(base);
    // Every 10th bf16 element moves one ulp up: regular enough that zstd always wins.
    for (uint64_t i = 0; i < 40000; i += 10) {
      testing::set_element_bits(current.tensors[0], i, testing::element_bits(base.tensors[0], i) ^ 1);
    }
    testing::apply_random_changes(current.tensors[1], 60, rng);
    testing::fill_random_bits(current.tensors[2], rng);  // every element new and random: dense wins
    target.copy_from(base);
    CodecOptions options;
    options.zstd_level = zstd;
    options.chunk_bytes = 16384;
    options.bucket_bytes = 4096;
    options.threads = 1;
    buckets = testing::encode_delta(manifest, options, base, current, 7, 8)->buckets;
  }

  // Replaces bucket `b` with `forged`, tries to commit, and checks the outcome.
  Status commit_with(size_t b, const std::vector<uint8_t>& forged) {
    std::vector<std::vector<uint8_t>> set = buckets;
    set[b] = forged;
    DeltaApplier applier(manifest, 1);
    return testing::verify_and_apply(applier, set, 7, target);
  }
  bool target_untouched() const { return target.same_bits(base) && target.guards_intact(); }
};

TEST(Corruption, SampleHasEveryChunkKind) {
  Sample s(3);
  ASSERT_GE(s.buckets.size(), 2u);
  bool sparse = false, dense = false, zstd = false;
  for (const auto& b : s.buckets) {
    size_t at = kFirstChunk;
    for (uint32_t c = 0; c < peek<uint32_t>(b, kChunkCount); ++c) {
      sparse |= b[at + kKind] == 1;
      dense |= b[at + kKind] == 0;
      zstd |= b[at + kCompression] == 1;
      at += align_up(ChunkHeader::kBytes + peek<uint64_t>(b, at + kBodyBytes), 8);
    }
  }
  EXPECT_TRUE(sparse && dense && zstd);
  DeltaApplier applier(s.manifest, 1);
  EXPECT_TRUE(testing::verify_and_apply(applier, s.buckets, 7, s.target).ok());
  EXPECT_TRUE(s.target.same_bits(s.current));
}

TEST(Corruption, EverySingleByteFlipIsRejected) {
  for (int zstd : {0, 3}) {
    Sample s(zstd);
    size_t tried = 0;
    for (size_t b = 0; b < s.buckets.size(); ++b) {
      for (size_t i = 0; i < s.buckets[b].size(); ++i) {
        for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
          std::vector<uint8_t> forged = s.buckets[b];
          forged[i] ^= mask;
          Status st = s.commit_with(b, forged);
          ASSERT_FALSE(st.ok()) << "bucket " << b << " byte " << i << " mask " << int(mask);
          ASSERT_TRUE(s.target_untouched()) << "bucket " << b << " byte " << i;
          ++tried;
        }
      }
    }
    EXPECT_GT(tried, 10000u);
  }
}

TEST(Corruption, EveryTruncationIsRejected) {
  Sample s(3);
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    for (size_t len = 0; len < s.buckets[b].size(); ++len) {
      std::vector<uint8_t> cut(s.buckets[b].begin(), s.buckets[b].begin() + static_cast<long>(len));
      ASSERT_FALSE(s.commit_with(b, cut).ok()) << "bucket " << b << " cut at " << len;
      ASSERT_TRUE(s.target_untouched());
    }
  }
}

TEST(Corruption, TruncationAtChunkBoundariesWithResealedChecksums) {
  // An attacker who recomputes the checksums after cutting: the chunk count no longer matches.
  Sample s(0);
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const auto& bucket = s.buckets[b];
    size_t at = kFirstChunk;
    std::vector<size_t> boundaries;
    for (uint32_t c = 0; c < peek<uint32_t>(bucket, kChunkCount); ++c) {
      boundaries.insert(boundaries.end(), {at, at + ChunkHeader::kBytes});
      at += align_up(ChunkHeader::kBytes + peek<uint64_t>(bucket, at + kBodyBytes), 8);
    }
    for (size_t cut_at : boundaries) {
      std::vector<uint8_t> cut(bucket.begin(), bucket.begin() + static_cast<long>(cut_at));
      poke<uint64_t>(cut, kPayloadBytes, cut_at - kFirstChunk);
      reseal(cut);
      Status st = s.commit_with(b, cut);
      ASSERT_FALSE(st.ok()) << "cut at " << cut_at;
      ASSERT_TRUE(s.target_untouched());
    }
  }
}

// Each forgery edits one field of the first bucket's first chunk (or the bucket header) and re-seals.
struct Forgery {
  const char* name;
  std::function<void(std::vector<uint8_t>&)> edit;
  const char* expected_message;  // a fragment of the error
};

void run_forgeries(Sample& s, size_t bucket, const std::vector<Forgery>& forgeries) {
  for (const Forgery& f : forgeries) {
    std::vector<uint8_t> forged = s.buckets[bucket];
    f.edit(forged);
    reseal(forged);
    s.target.copy_from(s.base);
    Status st = s.commit_with(bucket, forged);
    EXPECT_FALSE(st.ok()) << f.name;
    EXPECT_NE(st.message().find(f.expected_message), std::string::npos) << f.name << ": " << st.to_string();
    EXPECT_TRUE(s.target_untouched()) << f.name;
  }
}

struct ChunkAt {
  size_t bucket = 0;
  size_t offset = 0;  // of the chunk header inside the bucket
};

ChunkAt find_chunk(const Sample& s, uint8_t kind, uint8_t compression) {
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const auto& bucket = s.buckets[b];
    size_t at = kFirstChunk;
    for (uint32_t c = 0; c < peek<uint32_t>(bucket, kChunkCount); ++c) {
      if (bucket[at + kKind] == kind && bucket[at + kCompression] == compression) return {b, at};
      at += align_up(ChunkHeader::kBytes + peek<uint64_t>(bucket, at + kBodyBytes), 8);
    }
  }
  ADD_FAILURE() << "no chunk of kind " << int(kind) << " compression " << int(compression);
  return {};
}

TEST(Corruption, ForgedBucketFieldsAreRejected) {
  Sample s(0);
  const uint32_t chunks = peek<uint32_t>(s.buckets[0], kChunkCount);
  run_forgeries(
      s, 0,
      {
          {"chunk count +1", [&](auto& b) { poke<uint32_t>(b, kChunkCount, chunks + 1); }, "chunk"},
          {"chunk count -1", [&](auto& b) { poke<uint32_t>(b, kChunkCount, chunks - 1); }, "after the last chunk"},
          {"chunk count huge", [](auto& b) { poke<uint32_t>(b, kChunkCount, 0xffffffffu); }, "claims"},
          {"payload bytes +1", [](auto& b) { poke<uint64_t>(b, kPayloadBytes, peek<uint64_t>(b, kPayloadBytes) + 1); },
           "payload is"},
          {"payload bytes huge", [](auto& b) { poke<uint64_t>(b, kPayloadBytes, ~uint64_t{0}); }, "payload is"},
          {"bucket count 0", [](auto& b) { poke<uint32_t>(b, kBucketCount, 0); }, "impossible"},
          {"bucket index past count", [](auto& b) { poke<uint32_t>(b, kBucketIndex, peek<uint32_t>(b, kBucketCount)); },
           "impossible"},
          {"unknown flag", [](auto& b) { poke<uint32_t>(b, kFlags, 0x80); }, "unknown flags"},
          {"base after target", [](auto& b) { poke<uint64_t>(b, kBase, 9); }, "inconsistent"},
          {"other base version", [](auto& b) { poke<uint64_t>(b, kBase, 6); }, "belongs to version"},
          {"other manifest", [](auto& b) { poke<uint64_t>(b, kManifestHash, 12345); }, "manifest"},
      });
}

TEST(Corruption, ForgedSparseChunkFieldsAreRejected) {
  Sample s(0);
  const ChunkAt found = find_chunk(s, 1, 0);
  const size_t b = found.bucket, c = found.offset;  // plain variables: lambdas below capture them
  const auto& orig = s.buckets[b];
  const uint64_t count = peek<uint64_t>(orig, c + kElementCount);
  const uint64_t nnz = peek<uint64_t>(orig, c + kNnz);
  run_forgeries(
      s, b,
      {
          {"tensor index past manifest", [&](auto& x) { poke<uint32_t>(x, c + kTensor, 3); }, "names tensor 3"},
          {"start past tensor end", [&](auto& x) { poke<uint64_t>(x, c + kElementStart, 40000); }, "outside tensor"},
          {"start overflow", [&](auto& x) { poke<uint64_t>(x, c + kElementStart, ~uint64_t{0} - 10); },
           "outside tensor"},
          {"zero elements", [&](auto& x) { poke<uint64_t>(x, c + kElementCount, 0); }, "covers no elements"},
          {"count past tensor end", [&](auto& x) { poke<uint64_t>(x, c + kElementCount, 40001); }, "outside tensor"},
          {"count shrunk below positions", [&](auto& x) { poke<uint64_t>(x, c + kElementCount, count / 4); }, ""},
          {"nnz zero", [&](auto& x) { poke<uint64_t>(x, c + kNnz, 0); }, "claims 0 changes"},
          {"nnz > count", [&](auto& x) { poke<uint64_t>(x, c + kNnz, count + 1); }, "changes in"},
          {"nnz + 1", [&](auto& x) { poke<uint64_t>(x, c + kNnz, nnz + 1); }, ""},
          {"nnz - 1", [&](auto& x) { poke<uint64_t>(x, c + kNnz, nnz - 1); }, ""},
          {"reserved field", [&](auto& x) { poke<uint64_t>(x, c + kReserved64, 1); }, "reserved field"},
          {"raw body + 1 (a byte left over)", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, peek<uint64_t>(x, c + kRawBodyBytes) + 1); }, ""},
          {"raw body - 1 (a group cut short)", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, peek<uint64_t>(x, c + kRawBodyBytes) - 1); }, ""},
          {"body too small for its changes", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, 1); poke<uint64_t>(x, c + kBodyBytes, 1); }, "too small"},
          {"raw body huge", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, uint64_t{1} << 40); }, "byte body for a"},
          {"body bytes + 8", [&](auto& x) { poke<uint64_t>(x, c + kBodyBytes, peek<uint64_t>(x, c + kBodyBytes) + 8); },
           "stores"},
          {"body bytes huge", [&](auto& x) { poke<uint64_t>(x, c + kBodyBytes, ~uint64_t{0} - 3); }, "stores"},
          {"unknown kind", [&](auto& x) { x[c + kKind] = 7; }, "kind 7"},
          {"unknown codec", [&](auto& x) { x[c + kCodec] = 9; }, "codec 9"},
          {"unknown compression", [&](auto& x) { x[c + kCompression] = 5; }, "compression 5"},
          {"reserved byte", [&](auto& x) { x[c + kReserved] = 1; }, "reserved"},
          {"sparse claims dense", [&](auto& x) { x[c + kKind] = 0; }, "inconsistent sizes"},
          {"ulp on an integer tensor",
           [&](auto& x) {
             poke<uint32_t>(x, c + kTensor, 1);
             poke<uint64_t>(x, c + kElementStart, 0);
             poke<uint64_t>(x, c + kElementCount, 3000);
           },
           "non-float"},
          {"first index block width 65", [&](auto& x) { x[c + ChunkHeader::kBytes] = 65; }, "width 65"},
      });
}

TEST(Corruption, ForgedZstdChunkFieldsAreRejected) {
  Sample s(3);
  const ChunkAt found = find_chunk(s, 1, 1);
  const size_t z = found.bucket, c = found.offset;  // plain variables: lambdas below capture them
  const uint64_t raw = peek<uint64_t>(s.buckets[z], c + kRawBodyBytes);
  run_forgeries(s, z,
                {
                    {"zstd raw size + 1", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, raw + 1); }, ""},
                    {"zstd raw size - 1", [&](auto& x) { poke<uint64_t>(x, c + kRawBodyBytes, raw - 1); }, ""},
                    {"zstd frame garbage",
                     [&](auto& x) {
                       for (size_t i = 0; i < 8; ++i) x[c + ChunkHeader::kBytes + i] ^= 0x5a;
                     },
                     "zstd"},
                    {"zstd claims uncompressed", [&](auto& x) { x[c + kCompression] = 0; }, "stores"},
                });
}

TEST(Corruption, ForgedDenseChunkFieldsAreRejected) {
  Sample s(0);
  const ChunkAt found = find_chunk(s, 0, 0);
  const size_t b = found.bucket, c = found.offset;  // plain variables: lambdas below capture them
  run_forgeries(
      s, b,
      {
          {"dense nnz differs", [&](auto& x) { poke<uint64_t>(x, c + kNnz, 5); }, "inconsistent sizes"},
          {"dense with codec", [&](auto& x) { x[c + kCodec] = 1; }, "inconsistent sizes"},
          {"dense with reserved field", [&](auto& x) { poke<uint64_t>(x, c + kReserved64, 8); }, "reserved field"},
          {"dense count shrunk",
           [&](auto& x) { poke<uint64_t>(x, c + kElementCount, peek<uint64_t>(x, c + kElementCount) - 1); },
           "inconsistent sizes"},
      });
}

// Byte offsets of a bucket where any edit matters to the decoder: chunk headers and sparse bodies
// (a dense body accepts any bytes, so edits there only change values).
std::vector<size_t> decoded_bytes(const std::vector<uint8_t>& bucket) {
  std::vector<size_t> offsets;
  size_t at = kFirstChunk;
  for (uint32_t c = 0; c < peek<uint32_t>(bucket, kChunkCount); ++c) {
    const size_t body = peek<uint64_t>(bucket, at + kBodyBytes);
    const size_t end = at + ChunkHeader::kBytes + (bucket[at + kKind] == 1 ? body : 0);
    for (size_t i = at; i < end; ++i) offsets.push_back(i);
    at += align_up(ChunkHeader::kBytes + body, 8);
  }
  return offsets;
}

TEST(Corruption, RandomForgeriesNeverWriteOutsideTheTarget) {
  // Random multi-byte edits of headers and sparse bodies, re-sealed: whatever the verdict, no
  // crash and guards intact; a rejected version leaves the target untouched.
  Sample s(0);
  std::mt19937_64 rng(99);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t b = rng() % s.buckets.size();
    std::vector<uint8_t> forged = s.buckets[b];
    const std::vector<size_t> targets = decoded_bytes(forged);
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) forged[targets[rng() % targets.size()]] = static_cast<uint8_t>(rng());
    reseal(forged);
    s.target.copy_from(s.base);
    Status st = s.commit_with(b, forged);
    ASSERT_TRUE(s.target.guards_intact()) << "trial " << trial;
    if (!st.ok()) {
      ++rejected;
      ASSERT_TRUE(s.target.same_bits(s.base)) << "a rejected version wrote into the target, trial " << trial;
    }
  }
  // Most such edits break the structure; the rest decode to other in-range values.
  EXPECT_GT(rejected, 1500);
}

}  // namespace
}  // namespace deltacast
