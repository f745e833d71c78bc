// A second, deliberately plain reader written from sparse/FORMAT.md alone
// (bit-at-a-time unpacking, no shared code with the production decoder). It
// decodes what the encoder produces on random inputs; the result must equal
// both the producer's tensors and what the fast decoder wrote, and every PFOR
// block must use the width the spec's rule picks.
#include <gtest/gtest.h>

#include <random>

#include <xxhash.h>

#include "support/codec_harness.h"

namespace deltacast {
namespace {

struct Reader {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  uint64_t u(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{b.at(at + i)} << (8 * i);
    at += bytes;
    return v;
  }
};

uint64_t bits_at(const std::vector<uint8_t>& b, size_t byte0, uint64_t bit, unsigned width) {
  uint64_t v = 0;
  for (unsigned k = 0; k < width; ++k) {
    const uint64_t pos = bit + k;
    v |= uint64_t{(b.at(byte0 + pos / 8) >> (pos % 8)) & 1u} << k;
  }
  return v;
}

unsigned bit_length(uint64_t v) {
  unsigned n = 0;
  while (v) ++n, v >>= 1;
  return n;
}

size_t spec_block_size(const std::vector<uint64_t>& v, unsigned b) {
  unsigned m = 0, e = 0;
  for (uint64_t x : v) m = std::max(m, bit_length(x));
  for (uint64_t x : v) e += bit_length(x) > b;
  const size_t lows = (v.size() * b + 7) / 8;
  return e == 0 ? 2 + lows : 3 + lows + e + (size_t{e} * (m - b) + 7) / 8;
}

// Reads one PFOR block of `n` values starting at r.at; checks the spec's choice of b.
std::vector<uint64_t> read_pfor(Reader& r, uint64_t n) {
  std::vector<uint64_t> out;
  {
    const size_t start = r.at;
    const unsigned b = static_cast<unsigned>(r.u(1));
    const unsigned e = static_cast<unsigned>(r.u(1));
    const unsigned hb = e > 0 ? static_cast<unsigned>(r.u(1)) : 0;
    std::vector<uint64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bits_at(r.b, r.at, i * b, b);
    r.at += (n * b + 7) / 8;
    std::vector<size_t> pos(e);
    for (auto& p : pos) p = static_cast<size_t>(r.u(1));
    for (unsigned j = 0; j < e; ++j) v[pos[j]] |= bits_at(r.b, r.at, uint64_t{j} * hb, hb) << b;
    r.at += (size_t{e} * hb + 7) / 8;
    EXPECT_EQ(r.at - start, spec_block_size(v, b));
    unsigned m = 0;
    for (uint64_t x : v) m = std::max(m, bit_length(x));
    for (unsigned other = 0; other <= m; ++other) {
      const size_t size = spec_block_size(v, other);
      EXPECT_TRUE(size > r.at - start || (size == r.at - start && other >= b)) << "the spec picks b=" << other;
    }
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

uint64_t key(uint64_t u, unsigned w) {
  const uint64_t all = w == 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
  const uint64_t sign = uint64_t{1} << (w - 1);
  return u ^ ((u & sign) ? all : sign);
}

uint64_t unkey(uint64_t k, unsigned w) {
  const uint64_t all = w == 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
  const uint64_t sign = uint64_t{1} << (w - 1);
  return k ^ ((k & sign) ? sign : all);
}

// Applies one uncompressed bucket to `target` following the spec.
void spec_apply(const std::vector<uint8_t>& bucket, const Manifest& m, testing::TensorSet& target) {
  Reader r{bucket};
  ASSERT_EQ(r.u(4), 0x4b424344u);
  ASSERT_EQ(r.u(2), 1u);
  ASSERT_EQ(r.u(2), 72u);
  ASSERT_EQ(r.u(8), m.hash());
  r.at = 40;
  const uint64_t chunks = r.u(4);
  r.at = 48;
  ASSERT_EQ(r.u(8), bucket.size() - 72);
  r.at = 64;
  ASSERT_EQ(r.u(8), XXH3_64bits(bucket.data(), 64));
  for (uint64_t c = 0; c < chunks; ++c) {
    const size_t chunk_start = r.at;
    const uint64_t tensor = r.u(4), kind = r.u(1), codec = r.u(1), compression = r.u(1), reserved = r.u(1);
    const uint64_t start = r.u(8), count = r.u(8), nnz = r.u(8), reserved64 = r.u(8), raw_bytes = r.u(8),
                   body_bytes = r.u(8);
    ASSERT_EQ(compression, 0u);
    ASSERT_EQ(reserved, 0u);
    ASSERT_EQ(reserved64, 0u);
    ASSERT_EQ(raw_bytes, body_bytes);
    auto& t = target.tensors.at(tensor);
    const unsigned size = dtype_size(m[tensor].dtype), w = size * 8;
    const size_t body = r.at;
    if (kind == 0) {
      for (uint64_t i = 0; i < count; ++i) testing::set_element_bits(t, start + i, Reader{bucket, body + i * size}.u(size));
    } else {
      // Groups of up to 128 changes: a PFOR block of gaps, then the group's values.
      uint64_t next = 0;
      for (uint64_t done = 0; done < nnz; done += 128) {
        const uint64_t n = std::min<uint64_t>(128, nnz - done);
        std::vector<uint64_t> gaps = read_pfor(r, n);
        std::vector<uint64_t> values;
        if (codec == 0) {
          for (uint64_t i = 0; i < n; ++i) values.push_back(r.u(size));
        } else {
          values = read_pfor(r, n);
        }
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t p = next + gaps[i];
          next = p + 1;
          ASSERT_LT(p, count);
          uint64_t now = values[i];
          if (codec == 1) {
            const uint64_t all = w == 64 ? ~uint64_t{0} : (uint64_t{1} << w) - 1;
            const uint64_t z = values[i] + 1;
            const uint64_t d = (z >> 1) ^ (0 - (z & 1));
            now = unkey((key(testing::element_bits(t, start + p), w) + d) & all, w);
          }
          testing::set_element_bits(t, start + p, now);
        }
      }
      EXPECT_EQ(r.at - body, body_bytes);
    }
    r.at = chunk_start + 56 + (body_bytes + 56 + 7) / 8 * 8 - 56;
  }
  EXPECT_EQ(r.at, bucket.size());
}

TEST(FormatSpec, PlainReaderAgreesWithEncoderAndFastDecoder) {
  std::mt19937_64 rng(77);
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF8E5M2, DType::kI64, DType::kF64, DType::kU8}) {
    for (ValueCodec codec : {ValueCodec::kRaw, ValueCodec::kUlp}) {
      for (double density : {0.002, 0.05, 0.6}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << value_codec_name(codec) << " " << density);
        Manifest m = testing::make_manifest({{"a", dtype, {20011}}, {"b", dtype, {700}}});
        testing::TensorSet base(m), current(m), fast(m), spec(m);
        testing::random_version_pair(base, current, density, rng);
        CodecOptions options;
        options.value_codec = codec;
        options.chunk_bytes = 8192;
        auto delta = testing::encode_delta(m, options, base, current, 1, 2);
        ASSERT_TRUE(delta.ok());
        fast.copy_from(base);
        spec.copy_from(base);
        DeltaApplier applier(m, 1);
        ASSERT_TRUE(testing::verify_and_apply(applier, delta->buckets, 1, fast).ok());
        for (const auto& bucket : delta->buckets) spec_apply(bucket, m, spec);
        EXPECT_TRUE(spec.same_bits(current));
        EXPECT_TRUE(fast.same_bits(current));
      }
    }
  }
}

TEST(FormatSpec, GoldenBytesDoNotDrift) {
  // A fixed input and the hash of its encoding: a change here is a format change (bump format_version).
  Manifest m = testing::make_manifest({{"w", DType::kBF16, {1000}}, {"i", DType::kI32, {10}}});
  EXPECT_EQ(m.hash(), 0xfb353a8052eff041u) << std::hex << m.hash();
  testing::TensorSet base(m), current(m);
  for (uint64_t i = 0; i < 1000; ++i) testing::set_element_bits(base.tensors[0], i, 0x3c00 + i);
  current.copy_from(base);
  for (uint64_t i = 3; i < 1000; i += 37) testing::set_element_bits(current.tensors[0], i, 0x3c00 + i + (i % 3) - 1 + 2 * (i % 2));
  testing::set_element_bits(current.tensors[1], 7, 0xdeadbeef);
  auto delta = testing::encode_delta(m, CodecOptions{}, base, current, 4, 5);
  ASSERT_EQ(delta->buckets.size(), 1u);
  const auto& b = delta->buckets[0];
  EXPECT_EQ(b.size(), 232u);
  EXPECT_EQ(XXH3_64bits(b.data(), b.size()), 0xe5457b3380c467e0u) << std::hex << XXH3_64bits(b.data(), b.size());
}

}  // namespace
}  // namespace deltacast
