// A version's buckets packed into one blob and back, serial and parallel,
// and forged blobs refused without reading past their end.
#include "broadcast/engine/version_blob.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/byte_io.h"
#include "core/thread_pool.h"

namespace deltacast {
namespace {

std::vector<std::vector<uint8_t>> random_buckets(size_t count, std::mt19937& rng) {
  std::vector<std::vector<uint8_t>> buckets(count);
  for (auto& b : buckets) {
    b.resize(rng() % 3 == 0 ? 0 : rng() % 5000);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
  }
  return buckets;
}

TEST(VersionBlob, PacksAndUnpacksSerialAndParallelAlike) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  for (size_t count : {0u, 1u, 2u, 17u, 200u}) {
    const auto buckets = random_buckets(count, rng);
    const AlignedBuffer serial = pack_blob(buckets);
    ASSERT_EQ(serial.size(), blob_bytes(buckets));
    std::vector<uint8_t> parallel(serial.size());
    pack_blob_into(buckets, parallel.data(), &pool);
    ASSERT_EQ(std::memcmp(serial.data(), parallel.data(), serial.size()), 0);
    auto back = unpack_blob({serial.data(), serial.size()});
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->size(), count);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ((*back)[i].size(), buckets[i].size());
      EXPECT_TRUE(std::equal((*back)[i].begin(), (*back)[i].end(), buckets[i].begin()));
    }
  }
}

TEST(VersionBlob, ForgedBlobsAreRefused) {
  std::mt19937 rng(4);
  const auto buckets = random_buckets(5, rng);
  const AlignedBuffer blob = pack_blob(buckets);
  std::vector<uint8_t> b(blob.data(), blob.data() + blob.size());
  // Every truncation, a trailing byte, a wrong magic, a huge count and a huge size.
  for (size_t n = 0; n < b.size(); n += 1 + n / 7) EXPECT_FALSE(unpack_blob({b.data(), n}).ok()) << n;
  auto longer = b;
  longer.push_back(0);
  EXPECT_FALSE(unpack_blob({longer.data(), longer.size()}).ok());
  auto magic = b;
  magic[0] ^= 1;
  EXPECT_FALSE(unpack_blob({magic.data(), magic.size()}).ok());
  auto count = b;
  store_le<uint32_t>(count.data() + 4, 0xffffffffu);
  EXPECT_FALSE(unpack_blob({count.data(), count.size()}).ok());
  auto size = b;
  store_le<uint64_t>(size.data() + 8, ~uint64_t{0});
  EXPECT_FALSE(unpack_blob({size.data(), size.size()}).ok());
}

}  // namespace
}  // namespace deltacast
