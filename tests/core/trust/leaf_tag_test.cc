// Leaf tags (core/trust/leaf_tag.h): GMAC under a key from the secret and the buffer's salt, held
// to libcrypto's GMAC computed by hand here; every input they cover changes them; every library
// and the parallel maker give the same tags; a leaf checked in pieces equals one checked whole.
#include "core/trust/leaf_tag.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/byte_io.h"
#include "core/hash.h"
#include "core/thread_pool.h"
#include "support/random_bytes.h"

namespace deltacast::trust {
namespace {

using testing::random_bytes;

const GroupSecret kSecret = GroupSecret::from_legacy_token(4242);
const LeafSalt kSalt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// The reference: libcrypto's GMAC, keyed and laid out as leaf_tag.h says.
LeafTag reference_tag(const GroupSecret& secret, const LeafSalt& salt, uint64_t buffer_bytes, uint64_t index,
                      const uint8_t* leaf, size_t size) {
  const Key key = leaf_tag_key(secret, salt).value();
  auto gcm = make_aes_gcm(key, AesGcmLibrary::kOpenSsl);
  uint8_t iv[AesGcm::kIvBytes] = {};
  store_le<uint64_t>(iv, index);
  uint8_t header[8];
  store_le<uint64_t>(header, buffer_bytes);
  gcm->start(true, iv, header, sizeof header, AesGcm::Payload::kTagged);
  if (size > 0) gcm->add(leaf, const_cast<uint8_t*>(leaf), size);
  LeafTag tag;
  gcm->tag(tag.data());
  return tag;
}

TEST(LeafTag, IsGmacUnderTheSaltsKeyInEveryLibrary) {
  const auto leaf = random_bytes(kHashLeafBytes, 1);
  const LeafTag want = reference_tag(kSecret, kSalt, 5 * kHashLeafBytes, 3, leaf.data(), leaf.size());
  for (AesGcmLibrary library : usable_aes_gcm_libraries()) {
    auto tagger = LeafTagger::make(kSecret, kSalt, library).value();
    EXPECT_EQ(tagger->tag(5 * kHashLeafBytes, 3, leaf.data(), leaf.size()), want) << aes_gcm_library_name(library);
  }
}

TEST(LeafTag, EveryInputItCoversChangesIt) {
  auto leaf = random_bytes(1000, 2);
  auto tagger = LeafTagger::make(kSecret, kSalt).value();
  const LeafTag base = tagger->tag(1000, 0, leaf.data(), leaf.size());
  EXPECT_NE(tagger->tag(1001, 0, leaf.data(), leaf.size()), base);      // the buffer's size
  EXPECT_NE(tagger->tag(1000, 1, leaf.data(), leaf.size()), base);      // the leaf's place
  EXPECT_NE(tagger->tag(1000, 0, leaf.data(), leaf.size() - 1), base);  // cut short
  LeafSalt other_salt = kSalt;
  other_salt[15] ^= 1;
  EXPECT_NE(LeafTagger::make(kSecret, other_salt).value()->tag(1000, 0, leaf.data(), leaf.size()), base);
  EXPECT_NE(
      LeafTagger::make(GroupSecret::from_legacy_token(4243), kSalt).value()->tag(1000, 0, leaf.data(), leaf.size()),
      base);
  leaf[999] ^= 0x80;
  EXPECT_NE(tagger->tag(1000, 0, leaf.data(), leaf.size()), base);
}

TEST(LeafTag, ALeafCheckedInPiecesPassesAndOneBitOffFails) {
  auto leaf = random_bytes(kHashLeafBytes, 3);
  auto tagger = LeafTagger::make(kSecret, kSalt).value();
  const LeafTag tag = tagger->tag(kHashLeafBytes, 0, leaf.data(), leaf.size());
  tagger->begin(kHashLeafBytes, 0);
  tagger->add(leaf.data(), 100);
  tagger->add(leaf.data() + 100, 0);
  tagger->add(leaf.data() + 100, leaf.size() - 100);
  EXPECT_TRUE(tagger->verify(tag));
  leaf[kHashLeafBytes / 2] ^= 1;
  tagger->begin(kHashLeafBytes, 0);
  tagger->add(leaf.data(), leaf.size());
  EXPECT_FALSE(tagger->verify(tag));
  LeafTag forged = tag;
  forged[0] ^= 1;
  leaf[kHashLeafBytes / 2] ^= 1;
  tagger->begin(kHashLeafBytes, 0);
  tagger->add(leaf.data(), leaf.size());
  EXPECT_FALSE(tagger->verify(forged));
}

TEST(LeafTag, TheParallelMakerTagsEveryLeafAsOneTaggerWould) {
  ThreadPool pool(3);
  for (size_t size :
       {size_t{0}, size_t{1}, kHashLeafBytes - 1, kHashLeafBytes, kHashLeafBytes + 1, 37 * kHashLeafBytes + 17}) {
    const auto data = random_bytes(size, static_cast<uint32_t>(size));
    const LeafTags made = make_leaf_tags(kSecret, kSalt, data.data(), size, pool).value();
    ASSERT_EQ(made.tags.size(), content_hash_leaf_count(size)) << size;
    EXPECT_EQ(made.buffer_bytes, size);
    EXPECT_EQ(made.salt, kSalt);
    EXPECT_EQ(made.first_leaf, 0u);
    for (size_t i = 0; i < made.tags.size(); ++i) {
      const size_t at = std::min(size, i * kHashLeafBytes);
      const size_t n = std::min(kHashLeafBytes, size - at);
      EXPECT_EQ(made.tags[i], reference_tag(kSecret, kSalt, size, i, data.data() + at, n)) << size << " leaf " << i;
    }
  }
}

TEST(LeafTag, EachBufferIsTaggedUnderAFreshSalt) {
  EXPECT_NE(fresh_leaf_salt().value(), fresh_leaf_salt().value());
  ThreadPool pool(1);
  const auto data = random_bytes(100, 5);
  const LeafTags a = make_leaf_tags(kSecret, data.data(), data.size(), pool).value();
  const LeafTags b = make_leaf_tags(kSecret, data.data(), data.size(), pool).value();
  EXPECT_NE(a.salt, b.salt);
  EXPECT_NE(a.tags[0], b.tags[0]);
  EXPECT_EQ(a.tags[0], reference_tag(kSecret, a.salt, data.size(), 0, data.data(), data.size()));
}

}  // namespace
}  // namespace deltacast::trust
