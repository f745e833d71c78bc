#include "core/trust/frame_seal.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/byte_io.h"
#include "support/random_bytes.h"

namespace deltacast::trust {
namespace {

SessionKeys keys_for(Protection mode) {
  const GroupSecret secret = GroupSecret::from_legacy_token(99);
  return derive_keys(secret, fresh_hello(mode, Purpose::kData).value(), fresh_hello(mode, Purpose::kData).value(), mode).value();
}

using testing::random_bytes;

struct Frame {
  std::vector<uint8_t> header, payload;
  uint8_t tag[kTagBytes] = {};
};

Frame sealed(FrameSeal& seal, size_t payload_bytes, uint32_t seed) {
  Frame f{random_bytes(24, seed), random_bytes(payload_bytes, seed + 1)};
  seal.seal(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
  return f;
}

bool opens(FrameSeal& seal, Frame f) {
  return seal.open(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
}

// The reference: one-shot AES-256-GCM through EVP with the nonce the seal documents (4 zero bytes,
// the sequence number little-endian), payload encrypted or as associated data.
std::vector<uint8_t> reference_tag(const Key& key, uint64_t sequence, const Frame& plain, bool encrypt,
                                   std::vector<uint8_t>* ciphertext) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  uint8_t iv[12] = {};
  store_le<uint64_t>(iv + 4, sequence);
  EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), iv);
  int len = 0;
  EVP_EncryptUpdate(ctx, nullptr, &len, plain.header.data(), static_cast<int>(plain.header.size()));
  ciphertext->assign(plain.payload.size(), 0);
  if (encrypt) {
    EVP_EncryptUpdate(ctx, ciphertext->data(), &len, plain.payload.data(), static_cast<int>(plain.payload.size()));
  } else {
    EVP_EncryptUpdate(ctx, nullptr, &len, plain.payload.data(), static_cast<int>(plain.payload.size()));
    *ciphertext = plain.payload;
  }
  uint8_t rest[16];
  EVP_EncryptFinal_ex(ctx, rest, &len);
  std::vector<uint8_t> tag(kTagBytes);
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag.data());
  EVP_CIPHER_CTX_free(ctx);
  return tag;
}

// Every mode under every AES-GCM library this build and CPU can use (aes_gcm.h): the same tags
// and ciphertext as the reference either way.
class FrameSealModes : public ::testing::TestWithParam<std::tuple<Protection, AesGcmLibrary>> {
 protected:
  void SetUp() override {
    const AesGcmLibrary library = std::get<1>(GetParam());
    const auto usable = usable_aes_gcm_libraries();
    if (std::find(usable.begin(), usable.end(), library) == usable.end()) {
      GTEST_SKIP() << aes_gcm_library_name(library) << " is not usable in this build or on this CPU";
    }
    ASSERT_TRUE(set_aes_gcm_library(library).ok());
  }
  void TearDown() override { ASSERT_TRUE(set_aes_gcm_library(before_).ok()); }
  static Protection mode() { return std::get<0>(GetParam()); }

 private:
  AesGcmLibrary before_ = aes_gcm_library();
};

TEST_P(FrameSealModes, FramesOpenInOrderAndMatchTheReference) {
  const Protection mode = FrameSealModes::mode();
  const SessionKeys keys = keys_for(mode);
  auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
  for (uint32_t i = 0; i < 5; ++i) {
    const size_t bytes = i == 0 ? 0 : (1u << (4 * i)) + i;  // empty, then 17 B ... 64 KiB
    Frame plain{random_bytes(24, i), random_bytes(bytes, i + 1)};
    Frame f = plain;
    const uint64_t sequence = sender.outgoing->sequence();
    sender.outgoing->seal(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
    std::vector<uint8_t> expected_payload;
    const auto expected_tag =
        reference_tag(keys.client_to_server, sequence, plain, mode == Protection::kEncrypted, &expected_payload);
    EXPECT_EQ(std::vector<uint8_t>(f.tag, f.tag + kTagBytes), expected_tag);
    EXPECT_EQ(f.payload, expected_payload);
    if (mode == Protection::kEncrypted && bytes >= 16) {
      EXPECT_NE(f.payload, plain.payload);
    }
    ASSERT_TRUE(opens(*receiver.incoming, f)) << "frame " << i;
    EXPECT_EQ(f.payload.size(), plain.payload.size());
  }
}

TEST_P(FrameSealModes, AnyFlippedBitReplayReorderOrWrongDirectionFails) {
  const SessionKeys keys = keys_for(mode());
  for (int where = 0; where < 3; ++where) {
    auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
    Frame f = sealed(*sender.outgoing, 1000, 5);
    std::vector<uint8_t>& part = where == 0 ? f.header : f.payload;
    if (where < 2) {
      part[part.size() / 2] ^= 0x10;
    } else {
      f.tag[3] ^= 1;
    }
    EXPECT_FALSE(opens(*receiver.incoming, f)) << "damage in part " << where;
    // A seal that failed refuses to go on: the connection is dropped.
    EXPECT_THROW(opens(*receiver.incoming, f), std::logic_error);
  }
  {
    auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
    Frame first = sealed(*sender.outgoing, 100, 1);
    ASSERT_TRUE(opens(*receiver.incoming, first));
    EXPECT_FALSE(opens(*receiver.incoming, first)) << "a replayed frame opened";
  }
  {
    auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
    Frame first = sealed(*sender.outgoing, 100, 1);
    Frame second = sealed(*sender.outgoing, 100, 2);
    EXPECT_FALSE(opens(*receiver.incoming, second)) << "a reordered frame opened";
  }
  {
    auto client = seals_for(keys, Role::kClient);
    auto other_end = seals_for(keys, Role::kClient);
    Frame mine = sealed(*client.outgoing, 100, 1);
    EXPECT_FALSE(opens(*other_end.incoming, mine)) << "a frame reflected back to its sender opened";
  }
  {
    auto sender = seals_for(keys, Role::kClient);
    auto stranger = seals_for(keys_for(mode()), Role::kServer);  // another session's keys
    EXPECT_FALSE(opens(*stranger.incoming, sealed(*sender.outgoing, 100, 1))) << "a frame moved between sessions";
  }
}

TEST_P(FrameSealModes, PiecesSealAsTheWholeDoes) {
  const SessionKeys keys = keys_for(mode());
  auto whole = seals_for(keys, Role::kClient), pieces = seals_for(keys, Role::kClient);
  Frame f = sealed(*whole.outgoing, 300000, 11);
  Frame g{random_bytes(24, 11), random_bytes(300000, 12)};
  pieces.outgoing->begin(g.header.data(), g.header.size());
  for (size_t at = 0; at < g.payload.size(); at += 65537) {
    const size_t n = std::min<size_t>(65537, g.payload.size() - at);
    pieces.outgoing->add(g.payload.data() + at, g.payload.data() + at, n);
  }
  pieces.outgoing->finish(g.tag);
  EXPECT_EQ(0, std::memcmp(f.tag, g.tag, kTagBytes));
  EXPECT_EQ(f.payload, g.payload);
}

// Key updates against a reference of the rule: every frame's tag and ciphertext are the
// one-shot AES-GCM under the key a plain count of bytes says it falls under (the session's key
// moved on by next_key once per 4 KiB counted), frames sealed and opened in random pieces.
TEST_P(FrameSealModes, BothEndsMoveToTheNextKeyTogetherAtTheMark) {
  const Protection mode = FrameSealModes::mode();
  SessionKeys keys = keys_for(mode);
  keys.rekey_after_bytes = 4096;
  auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
  std::mt19937 rng(7);
  Key expected_key = keys.client_to_server;
  uint64_t counted = 0, generation = 0;
  for (uint32_t i = 0; i < 300; ++i) {
    const size_t bytes = i % 50 == 0 ? 0 : rng() % 3000;
    const Frame plain{random_bytes(1 + rng() % 40, 2 * i), random_bytes(bytes, 2 * i + 1)};
    Frame f = plain;
    const uint64_t sequence = sender.outgoing->sequence();
    sender.outgoing->begin(f.header.data(), f.header.size());
    for (size_t at = 0; at < bytes;) {
      const size_t n = std::min<size_t>(bytes - at, 1 + rng() % 700);
      sender.outgoing->add(f.payload.data() + at, f.payload.data() + at, n);
      at += n;
    }
    sender.outgoing->finish(f.tag);
    std::vector<uint8_t> expected_payload;
    const bool encrypt = mode == Protection::kEncrypted;
    ASSERT_EQ(std::vector<uint8_t>(f.tag, f.tag + kTagBytes),
              reference_tag(expected_key, sequence, plain, encrypt, &expected_payload))
        << "frame " << i << " under key generation " << generation;
    ASSERT_EQ(f.payload, expected_payload) << "frame " << i;
    receiver.incoming->begin_open(f.header.data(), f.header.size());
    for (size_t at = 0; at < bytes;) {
      const size_t n = std::min<size_t>(bytes - at, 1 + rng() % 900);
      receiver.incoming->add_open(f.payload.data() + at, f.payload.data() + at, n);
      at += n;
    }
    ASSERT_TRUE(receiver.incoming->check(f.tag)) << "frame " << i;
    ASSERT_EQ(f.payload, plain.payload) << "frame " << i;
    counted += plain.header.size() + bytes + kTagBytes;
    if (counted >= keys.rekey_after_bytes) {
      expected_key = next_key(expected_key);
      counted = 0;
      ++generation;
    }
    ASSERT_EQ(sender.outgoing->key_generation(), generation) << "after frame " << i;
    ASSERT_EQ(receiver.incoming->key_generation(), generation) << "after frame " << i;
  }
  EXPECT_GT(generation, 50u);
  // The other direction counts its own frames: none went that way.
  EXPECT_EQ(sender.incoming->key_generation(), 0u);
}

TEST_P(FrameSealModes, AnEndThatDoesNotMoveToTheNextKeyFailsTheNextFrame) {
  SessionKeys keys = keys_for(mode());
  SessionKeys stays = keys;
  keys.rekey_after_bytes = 1000;
  auto sender = seals_for(keys, Role::kClient), receiver = seals_for(stays, Role::kServer);
  ASSERT_TRUE(opens(*receiver.incoming, sealed(*sender.outgoing, 900, 1)));  // 24 + 900 + 16: under
  ASSERT_TRUE(opens(*receiver.incoming, sealed(*sender.outgoing, 100, 2)));  // crosses: the sender moves on
  ASSERT_EQ(sender.outgoing->key_generation(), 1u);
  EXPECT_FALSE(opens(*receiver.incoming, sealed(*sender.outgoing, 100, 3)));
  // A frame sealed under the first key, replayed to an end that has moved on, fails too.
  auto sender2 = seals_for(keys, Role::kClient), receiver2 = seals_for(keys, Role::kServer);
  const Frame first = sealed(*sender2.outgoing, 2000, 4);
  ASSERT_TRUE(opens(*receiver2.incoming, first));
  ASSERT_EQ(receiver2.incoming->key_generation(), 1u);
  EXPECT_FALSE(opens(*receiver2.incoming, first));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, FrameSealModes,
    ::testing::Combine(::testing::Values(Protection::kAuthenticated, Protection::kEncrypted),
                       ::testing::Values(AesGcmLibrary::kOpenSsl, AesGcmLibrary::kIpsecMb)),
    [](const ::testing::TestParamInfo<std::tuple<Protection, AesGcmLibrary>>& param) {
      std::string name = std::string(protection_name(std::get<0>(param.param))) + "_" +
                         std::string(aes_gcm_library_name(std::get<1>(param.param)));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST(FrameSeal, NumberedFramesCheckInAnyOrderAndOnlyUnderTheirNumber) {
  const SessionKeys keys = keys_for(Protection::kAuthenticated);
  FrameSeal sender(keys.client_to_server, keys.mode), receiver(keys.client_to_server, keys.mode);
  std::vector<Frame> frames;
  for (uint32_t n = 0; n < 4; ++n) {
    Frame f{random_bytes(48, 10 * n), random_bytes(1000 + 7 * n, 10 * n + 1)};
    sender.tag_numbered(n, f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
    // The same tag as the reference's for that number: the payload is only tagged.
    std::vector<uint8_t> unused;
    EXPECT_EQ(std::vector<uint8_t>(f.tag, f.tag + kTagBytes), reference_tag(keys.client_to_server, n, f, false, &unused));
    frames.push_back(std::move(f));
  }
  EXPECT_EQ(sender.sequence(), 0u) << "numbered frames leave the counted sequence alone";
  const auto check = [&](FrameSeal& seal, uint64_t n, const Frame& f) {
    return seal.check_numbered(n, f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
  };
  for (uint64_t n : {2u, 0u, 3u, 1u}) EXPECT_TRUE(check(receiver, n, frames[n])) << n;
  // Under another number (a replayed or moved frame), with a flipped payload bit or header bit: refused.
  FrameSeal a(keys.client_to_server, keys.mode), b(keys.client_to_server, keys.mode), c(keys.client_to_server, keys.mode);
  EXPECT_FALSE(check(a, 1, frames[0]));
  Frame flipped = frames[1];
  flipped.payload[999] ^= 0x10;
  EXPECT_FALSE(check(b, 1, flipped));
  flipped = frames[1];
  flipped.header[3] ^= 1;
  EXPECT_FALSE(check(c, 1, flipped));
  // The other direction's key opens nothing.
  FrameSeal wrong_way(keys.server_to_client, keys.mode);
  EXPECT_FALSE(check(wrong_way, 0, frames[0]));
  // An encrypting seal does not number frames: its payloads must change, and these are read-only.
  const SessionKeys encrypted = keys_for(Protection::kEncrypted);
  FrameSeal encrypting(encrypted.client_to_server, encrypted.mode);
  uint8_t tag[kTagBytes];
  EXPECT_THROW(encrypting.tag_numbered(0, frames[0].header.data(), 48, frames[0].payload.data(), 10, tag),
               std::logic_error);
}

// HKDF-SHA256's expansion to 32 bytes is one HMAC block: HMAC(key, label | 0x01). Held to that,
// computed through libcrypto's HMAC directly.
TEST(FrameSeal, TheNextKeyIsHkdfExpandOfTheCurrentOne) {
  const Key key = keys_for(Protection::kEncrypted).client_to_server;
  const std::string label = "deltacast key update v1";
  std::vector<uint8_t> message(label.begin(), label.end());
  message.push_back(1);
  Key expected{};
  unsigned int length = 0;
  ASSERT_NE(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(),
                 expected.data(), &length),
            nullptr);
  ASSERT_EQ(length, expected.size());
  EXPECT_EQ(next_key(key), expected);
  EXPECT_NE(next_key(key), key);
  EXPECT_NE(next_key(next_key(key)), next_key(key));
  EXPECT_THROW(FrameSeal(key, Protection::kEncrypted, 0), std::invalid_argument);
}

TEST(FrameSeal, InsecureAddsNothingAndChecksNothing) {
  const SessionKeys keys = keys_for(Protection::kInsecure);
  auto sender = seals_for(keys, Role::kClient), receiver = seals_for(keys, Role::kServer);
  EXPECT_EQ(sender.outgoing->overhead(), 0u);
  Frame plain{random_bytes(8, 1), random_bytes(64, 2)};
  Frame f = plain;
  sender.outgoing->seal(f.header.data(), f.header.size(), f.payload.data(), f.payload.size(), f.tag);
  EXPECT_EQ(f.payload, plain.payload);
  EXPECT_TRUE(opens(*receiver.incoming, f));
}

}  // namespace
}  // namespace deltacast::trust
