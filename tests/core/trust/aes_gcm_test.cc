// The AES-GCM libraries against each other (aes_gcm.h): every usable implementation (each of
// ipsec-mb's code paths this CPU runs) seals and opens with the same bytes as OpenSSL's, over
// random headers, payloads and piece boundaries (sealing and opening cut apart differently),
// empty and past 2^31 bytes; each refuses what the other sealed once a bit is flipped.
#include "core/trust/aes_gcm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace deltacast::trust {
namespace {

using Payload = AesGcm::Payload;

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

Key random_key(std::mt19937_64& rng) {
  Key key{};
  for (auto& b : key) b = static_cast<uint8_t>(rng());
  return key;
}

struct Sealed {
  std::vector<uint8_t> payload;  // ciphertext, or the payload as it was when only tagged
  uint8_t tag[AesGcm::kTagBytes] = {};
};

// Seals in pieces at the given cuts (offsets into the payload, rising).
Sealed seal(AesGcm& gcm, const uint8_t iv[AesGcm::kIvBytes], const std::vector<uint8_t>& header,
            const std::vector<uint8_t>& payload, Payload kind, const std::vector<size_t>& cuts) {
  Sealed out;
  out.payload = payload;
  gcm.start(true, iv, header.data(), header.size(), kind);
  size_t at = 0;
  for (size_t cut : cuts) {
    gcm.add(payload.data() + at, out.payload.data() + at, cut - at);
    at = cut;
  }
  gcm.add(payload.data() + at, out.payload.data() + at, payload.size() - at);
  gcm.tag(out.tag);
  return out;
}

// Opens in pieces at the given cuts, as a rail end opens a slice while it lands.
bool opens(AesGcm& gcm, const uint8_t iv[AesGcm::kIvBytes], const std::vector<uint8_t>& header, const Sealed& sealed,
           Payload kind, const std::vector<uint8_t>& expected_plain, const std::vector<size_t>& cuts = {}) {
  std::vector<uint8_t> plain(sealed.payload.size());
  gcm.start(false, iv, header.data(), header.size(), kind);
  size_t at = 0;
  for (size_t cut : cuts) {
    gcm.add(sealed.payload.data() + at, plain.data() + at, cut - at);
    at = cut;
  }
  gcm.add(sealed.payload.data() + at, plain.data() + at, plain.size() - at);
  const bool right = gcm.verify(sealed.tag);
  if (right && kind == Payload::kEncrypted) {
    EXPECT_EQ(plain, expected_plain);
  }
  return right;
}

std::vector<AesGcmLibrary> others_than_openssl() {
  std::vector<AesGcmLibrary> out = usable_aes_gcm_libraries();
  std::erase(out, AesGcmLibrary::kOpenSsl);
  return out;
}

// Every implementation besides libcrypto's that this build and CPU run: each of ipsec-mb's code
// paths (SSE, AVX, AVX2, AVX-512: separate code in the library), by name.
struct Implementation {
  std::string name;
  std::function<std::unique_ptr<AesGcm>(const Key&)> make;
};
std::vector<Implementation> implementations_besides_openssl() {
  std::vector<Implementation> out;
  for (const std::string& path : ipsec_mb_code_paths()) {
    out.push_back({"ipsec-mb/" + path, [path](const Key& key) { return make_ipsec_mb_aes_gcm(key, path); }});
  }
  return out;
}

TEST(AesGcm, IpsecMbIsUsableWhereBuiltInAndTheCpuHasAesNi) {
  if (!ipsec_mb_built_in()) GTEST_SKIP() << "this build has no ipsec-mb";
  const bool aes_ni = __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
  EXPECT_EQ(ipsec_mb_usable(), aes_ni);
  if (!aes_ni) return;
  const auto paths = ipsec_mb_code_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), "sse") << "every AES-NI CPU runs the SSE path";
  EXPECT_EQ(make_ipsec_mb_aes_gcm(Key{}, "sideways"), nullptr);
}

TEST(AesGcm, EveryLibrarySealsAndOpensAsOpenSslDoes) {
  const auto tested_ones = implementations_besides_openssl();
  if (tested_ones.empty()) GTEST_SKIP() << "only OpenSSL is usable in this build or on this CPU";
  std::mt19937_64 rng(7);
  const size_t sizes[] = {0, 1, 15, 16, 17, 63, 64, 255, 4096 + 7, 65536, 300001};
  for (const Implementation& implementation : tested_ones) {
    for (int round = 0; round < 40; ++round) {
      const Key key = random_key(rng);
      auto reference = make_openssl_aes_gcm(key);
      auto tested = implementation.make(key);
      ASSERT_NE(tested, nullptr) << implementation.name;
      const size_t header_size = std::vector<size_t>{0, 1, 24, 40, 100}[round % 5];
      const std::vector<uint8_t> header = random_bytes(header_size, rng);
      const std::vector<uint8_t> payload = random_bytes(sizes[round % std::size(sizes)], rng);
      uint8_t iv[AesGcm::kIvBytes];
      for (auto& b : iv) b = static_cast<uint8_t>(rng());
      // Cut the payload at random places (some pieces empty or a single byte).
      std::vector<size_t> cuts;
      for (int i = 0; i < round % 6 && !payload.empty(); ++i) cuts.push_back(rng() % (payload.size() + 1));
      std::sort(cuts.begin(), cuts.end());
      for (Payload kind : {Payload::kTagged, Payload::kEncrypted}) {
        const Sealed expected = seal(*reference, iv, header, payload, kind, {});
        const Sealed got = seal(*tested, iv, header, payload, kind, cuts);
        const std::string what = implementation.name + " round " + std::to_string(round) +
                                 (kind == Payload::kTagged ? " tagged" : " encrypted") + ", " +
                                 std::to_string(payload.size()) + " bytes";
        ASSERT_EQ(0, std::memcmp(expected.tag, got.tag, AesGcm::kTagBytes)) << what;
        ASSERT_EQ(expected.payload, got.payload) << what;
        if (kind == Payload::kTagged) {
          ASSERT_EQ(got.payload, payload) << what;
        }
        // Each opens what the other sealed (in pieces cut elsewhere), and neither opens it with one
        // bit flipped anywhere.
        std::vector<size_t> open_cuts;
        for (int i = 0; i < (round + 3) % 5 && !payload.empty(); ++i) open_cuts.push_back(rng() % (payload.size() + 1));
        std::sort(open_cuts.begin(), open_cuts.end());
        EXPECT_TRUE(opens(*tested, iv, header, expected, kind, payload, open_cuts)) << what;
        EXPECT_TRUE(opens(*reference, iv, header, got, kind, payload, open_cuts)) << what;
        Sealed damaged = got;
        const int where = round % 3;
        if (where == 0 && !damaged.payload.empty()) {
          damaged.payload[rng() % damaged.payload.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        } else if (where == 1 && !header.empty()) {
          std::vector<uint8_t> other = header;
          other[rng() % other.size()] ^= 0x01;
          EXPECT_FALSE(opens(*tested, iv, other, got, kind, payload)) << what << ", header flipped";
          EXPECT_FALSE(opens(*reference, iv, other, got, kind, payload)) << what << ", header flipped";
          continue;
        } else {
          // Every byte of the tag counts (a compare cut short would pass a flip in the bytes it skips).
          for (size_t i = 0; i < AesGcm::kTagBytes; ++i) {
            Sealed wrong_tag = got;
            wrong_tag.tag[i] ^= 0x80;
            EXPECT_FALSE(opens(*tested, iv, header, wrong_tag, kind, payload)) << what << ", tag byte " << i;
            EXPECT_FALSE(opens(*reference, iv, header, wrong_tag, kind, payload)) << what << ", tag byte " << i;
          }
          continue;
        }
        EXPECT_FALSE(opens(*tested, iv, header, damaged, kind, payload)) << what << ", damaged";
        EXPECT_FALSE(opens(*reference, iv, header, damaged, kind, payload)) << what << ", damaged";
      }
    }
  }
}

// Past 2^31 bytes in one message, as 8 pieces of 256 MiB and an odd tail: a length counted in 32
// bits anywhere (the pieces, the final length block in bits) would change the tag.
TEST(AesGcm, AMessageAboveTwoToTheThirtyOneBytesSealsAlike) {
  if (others_than_openssl().empty()) GTEST_SKIP() << "only OpenSSL is usable in this build or on this CPU";
  std::mt19937_64 rng(11);
  const Key key = random_key(rng);
  const std::vector<uint8_t> piece = random_bytes(size_t{256} << 20, rng);
  const std::vector<uint8_t> header = random_bytes(24, rng);
  const uint8_t iv[AesGcm::kIvBytes] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<uint8_t> out(piece.size());
  const auto seal_huge = [&](AesGcm& gcm, Payload kind, uint8_t tag[AesGcm::kTagBytes], uint64_t* ciphertext_sum) {
    gcm.start(true, iv, header.data(), header.size(), kind);
    *ciphertext_sum = 0;
    for (int i = 0; i < 8; ++i) {
      gcm.add(piece.data(), out.data(), piece.size());
      if (kind == Payload::kEncrypted) *ciphertext_sum += out[i * 4099] + (uint64_t{out[out.size() - 1 - i]} << 8);
    }
    gcm.add(piece.data(), out.data(), 13);
    gcm.tag(tag);
  };
  for (AesGcmLibrary library : others_than_openssl()) {
    for (Payload kind : {Payload::kTagged, Payload::kEncrypted}) {
      uint8_t expected[AesGcm::kTagBytes], got[AesGcm::kTagBytes];
      uint64_t expected_sum = 0, got_sum = 0;
      seal_huge(*make_openssl_aes_gcm(key), kind, expected, &expected_sum);
      seal_huge(*make_aes_gcm(key, library), kind, got, &got_sum);
      EXPECT_EQ(0, std::memcmp(expected, got, AesGcm::kTagBytes)) << aes_gcm_library_name(library);
      EXPECT_EQ(expected_sum, got_sum) << aes_gcm_library_name(library);
    }
  }
}

// GCM's block counter bounds one message's encrypted payload at 2^36 - 32 bytes; past it the
// keystream repeats. ipsec-mb does not count, so deltacast does, refusing before a byte is read.
TEST(AesGcm, AnEncryptedPayloadPastGcmsLimitIsRefused) {
  if (others_than_openssl().empty()) GTEST_SKIP() << "only OpenSSL is usable in this build or on this CPU";
  constexpr uint64_t kLimit = (uint64_t{1} << 36) - 32;
  std::vector<uint8_t> piece(64), out(64);
  const uint8_t iv[AesGcm::kIvBytes] = {};
  for (AesGcmLibrary library : others_than_openssl()) {
    auto gcm = make_aes_gcm(Key{}, library);
    gcm->start(true, iv, nullptr, 0, Payload::kEncrypted);
    gcm->add(piece.data(), out.data(), piece.size());
    // The size alone is refused: the pointer is never read past its 64 bytes.
    EXPECT_THROW(gcm->add(piece.data(), out.data(), kLimit - piece.size() + 1), std::length_error)
        << aes_gcm_library_name(library);
  }
}

TEST(AesGcm, ChoosingALibraryIsCheckedAndNamed) {
  const auto usable = usable_aes_gcm_libraries();
  ASSERT_FALSE(usable.empty());
  EXPECT_EQ(usable.back(), AesGcmLibrary::kOpenSsl) << "OpenSSL is always usable, and the slowest";
  EXPECT_EQ(*parse_aes_gcm_library("auto"), usable.front());
  EXPECT_EQ(*parse_aes_gcm_library("openssl"), AesGcmLibrary::kOpenSsl);
  EXPECT_EQ(*parse_aes_gcm_library("ipsec-mb"), AesGcmLibrary::kIpsecMb);
  const auto bad = parse_aes_gcm_library("chacha");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chacha"), std::string::npos) << bad.status().to_string();

  const AesGcmLibrary before = aes_gcm_library();
  ASSERT_TRUE(set_aes_gcm_library(AesGcmLibrary::kOpenSsl).ok());
  EXPECT_EQ(aes_gcm_library(), AesGcmLibrary::kOpenSsl);
  if (std::find(usable.begin(), usable.end(), AesGcmLibrary::kIpsecMb) == usable.end()) {
    const Status refused = set_aes_gcm_library(AesGcmLibrary::kIpsecMb);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("ipsec-mb"), std::string::npos) << refused.to_string();
    EXPECT_EQ(aes_gcm_library(), AesGcmLibrary::kOpenSsl) << "a refused choice changes nothing";
    EXPECT_THROW(make_aes_gcm(Key{}, AesGcmLibrary::kIpsecMb), std::invalid_argument);
  }
  ASSERT_TRUE(set_aes_gcm_library(before).ok());
}

}  // namespace
}  // namespace deltacast::trust
