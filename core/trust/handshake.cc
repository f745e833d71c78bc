#include "core/trust/handshake.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

#include "core/byte_io.h"

namespace deltacast::trust {
namespace {

constexpr std::string_view kProofLabel = "deltacast proof v1";
constexpr std::string_view kKeyLabel = "deltacast session keys v1";
constexpr std::string_view kKeyUpdateLabel = "deltacast key update v1";
constexpr std::string_view kLeafTagLabel = "deltacast leaf tags v1";

bool known_purpose(uint8_t p) { return p >= 1 && p <= 3; }

std::string_view what_serves(Purpose purpose) {
  switch (purpose) {
    case Purpose::kControl: return "a producer's control port";
    case Purpose::kData: return "a consumer's data rail";
    case Purpose::kCoordinator: return "the group's coordinator";
  }
  return "unknown";
}

}  // namespace

std::string_view purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::kControl: return "control";
    case Purpose::kData: return "data";
    case Purpose::kCoordinator: return "coordinator";
  }
  return "unknown";
}

constexpr uint8_t kMinRekeyLog2 = 10;
constexpr uint8_t kMaxRekeyLog2 = 62;

Result<uint8_t> rekey_mark_log2(uint64_t rekey_after_bytes) {
  for (uint8_t n = kMinRekeyLog2; n <= kMaxRekeyLog2; ++n) {
    if (rekey_after_bytes == uint64_t{1} << n) return n;
  }
  return invalid_argument("the key-update mark ({} bytes) must be a power of two from 2^{} to 2^{}", rekey_after_bytes,
                          kMinRekeyLog2, kMaxRekeyLog2);
}

Result<Hello> fresh_hello(Protection mode, Purpose purpose, uint8_t rekey_log2) {
  Hello hello;
  hello.mode = mode;
  hello.purpose = purpose;
  hello.rekey_log2 = rekey_log2;
  // A repeated nonce would let a recorded proof be replayed: no fallback to a weaker source.
  if (RAND_bytes(hello.nonce.data(), static_cast<int>(hello.nonce.size())) != 1) {
    return internal_error("handshake: libcrypto's random source failed");
  }
  return hello;
}

void encode_hello(const Hello& hello, uint8_t out[kHelloBytes]) {
  store_le<uint32_t>(out, kHelloMagic);
  out[4] = kHandshakeVersion;
  out[5] = static_cast<uint8_t>(hello.mode);
  out[6] = static_cast<uint8_t>(hello.purpose);
  out[7] = hello.rekey_log2;
  std::memcpy(out + 8, hello.nonce.data(), kNonceBytes);
}

Result<Hello> decode_hello(const uint8_t* bytes, size_t size) {
  if (size != kHelloBytes) return corrupt("handshake: a hello of {} bytes (expected {})", size, kHelloBytes);
  if (load_le<uint32_t>(bytes) != kHelloMagic) {
    return permission_denied("handshake: the peer speaks no authentication (an older deltacast, or not deltacast)");
  }
  if (bytes[4] != kHandshakeVersion) {
    return failed_precondition("handshake: the peer speaks handshake version {}, this side {}", bytes[4],
                               kHandshakeVersion);
  }
  if (bytes[5] > static_cast<uint8_t>(Protection::kEncrypted)) return corrupt("handshake: unknown mode {}", bytes[5]);
  if (!known_purpose(bytes[6])) return corrupt("handshake: unknown purpose {}", bytes[6]);
  if (bytes[7] < kMinRekeyLog2 || bytes[7] > kMaxRekeyLog2) {
    return corrupt("handshake: a key-update mark of 2^{} bytes (2^{} to 2^{} are known)", bytes[7], kMinRekeyLog2,
                   kMaxRekeyLog2);
  }
  Hello hello;
  hello.mode = static_cast<Protection>(bytes[5]);
  hello.purpose = static_cast<Purpose>(bytes[6]);
  hello.rekey_log2 = bytes[7];
  std::memcpy(hello.nonce.data(), bytes + 8, kNonceBytes);
  return hello;
}

Proof prove(const GroupSecret& secret, Role role, const Hello& client, const Hello& server, const Exchange* exchange) {
  // label | role | client HELLO | server HELLO [| client share | server share]
  constexpr size_t kHellos = kProofLabel.size() + 1 + 2 * kHelloBytes;
  uint8_t message[kHellos + 2 * kShareBytes];
  std::memcpy(message, kProofLabel.data(), kProofLabel.size());
  message[kProofLabel.size()] = static_cast<uint8_t>(role);
  encode_hello(client, message + kProofLabel.size() + 1);
  encode_hello(server, message + kProofLabel.size() + 1 + kHelloBytes);
  size_t length = kHellos;
  if (exchange != nullptr) {
    std::memcpy(message + kHellos, exchange->client.data(), kShareBytes);
    std::memcpy(message + kHellos + kShareBytes, exchange->server.data(), kShareBytes);
    length += 2 * kShareBytes;
  }
  Proof proof{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.bytes().data(), static_cast<int>(secret.bytes().size()), message, length, proof.data(),
       &len);
  return proof;
}

bool proof_is_right(const GroupSecret& secret, Role role, const Hello& client, const Hello& server,
                    const uint8_t received[kProofBytes], const Exchange* exchange) {
  const Proof expected = prove(secret, role, client, server, exchange);
  return CRYPTO_memcmp(expected.data(), received, kProofBytes) == 0;
}

Result<Protection> agree_terms(Role self, Protection required, const Hello& client, const Hello& server) {
  if (client.purpose != server.purpose) {
    if (self == Role::kClient) {
      return permission_denied("handshake: the peer is {}, not {}", what_serves(server.purpose),
                               what_serves(client.purpose));
    }
    return permission_denied("handshake: the peer asked for {}; this is {}", what_serves(client.purpose),
                             what_serves(server.purpose));
  }
  if (client.rekey_log2 != server.rekey_log2) {
    const Hello& mine = self == Role::kClient ? client : server;
    const Hello& theirs = self == Role::kClient ? server : client;
    return permission_denied(
        "handshake: the peer moves to a new key every 2^{} bytes; this side every 2^{} (every "
        "member must use the same key-update mark)",
        theirs.rekey_log2, mine.rekey_log2);
  }
  return agree_protection(required, self == Role::kClient ? server.mode : client.mode);
}

Status check_proof(const GroupSecret& secret, Role prover, const Hello& client, const Hello& server,
                   const uint8_t received[kProofBytes], const Exchange* exchange) {
  if (proof_is_right(secret, prover, client, server, received, exchange)) return Status();
  // A replayed or altered handshake fails the same proof: the message names both causes.
  return permission_denied(
      "handshake: wrong secret (the peer does not hold this group's secret, or the handshake was replayed or altered "
      "on the way)");
}

namespace {

// HKDF-SHA256 (RFC 5869) from libcrypto: extract and expand where a salt is given; expand only
// where it is not (the key is then already a uniformly random key, as a session key is).
bool hkdf_sha256(const uint8_t* key, size_t key_size, const uint8_t* salt, size_t salt_size, const uint8_t* info,
                 size_t info_size, uint8_t* out, size_t out_size) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return false;
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return false;
  char digest[] = "SHA256";
  int mode = salt != nullptr ? EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND : EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[6];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key), key_size);
  if (salt != nullptr) {
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<uint8_t*>(salt), salt_size);
  }
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info), info_size);
  params[n] = OSSL_PARAM_construct_end();
  const int ok = EVP_KDF_derive(ctx, out, out_size, params);
  EVP_KDF_CTX_free(ctx);
  return ok == 1;
}

}  // namespace

Result<SessionKeys> derive_keys(const GroupSecret& secret, const Hello& client, const Hello& server, Protection mode,
                                const Exchange* exchange) {
  uint8_t salt[2 * kNonceBytes];
  std::memcpy(salt, client.nonce.data(), kNonceBytes);
  std::memcpy(salt + kNonceBytes, server.nonce.data(), kNonceBytes);
  uint8_t info[kKeyLabel.size() + 2];
  std::memcpy(info, kKeyLabel.data(), kKeyLabel.size());
  info[kKeyLabel.size()] = static_cast<uint8_t>(client.purpose);
  info[kKeyLabel.size() + 1] = static_cast<uint8_t>(mode);
  // The input key: the group secret, then the exchange's agreed secret where there was one.
  uint8_t input[GroupSecret::kBytes + sizeof(SharedSecret)];
  std::memcpy(input, secret.bytes().data(), GroupSecret::kBytes);
  size_t input_size = GroupSecret::kBytes;
  if (exchange != nullptr) {
    std::memcpy(input + GroupSecret::kBytes, exchange->agreed.data(), exchange->agreed.size());
    input_size += exchange->agreed.size();
  }
  uint8_t out[2 * kKeyBytes];
  const bool derived = hkdf_sha256(input, input_size, salt, sizeof salt, info, sizeof info, out, sizeof out);
  OPENSSL_cleanse(input, sizeof input);
  if (!derived) return internal_error("handshake: libcrypto's HKDF failed");
  SessionKeys keys;
  std::memcpy(keys.client_to_server.data(), out, kKeyBytes);
  std::memcpy(keys.server_to_client.data(), out + kKeyBytes, kKeyBytes);
  keys.mode = mode;
  OPENSSL_cleanse(out, sizeof out);
  return keys;
}

SessionKeys::~SessionKeys() {
  OPENSSL_cleanse(client_to_server.data(), client_to_server.size());
  OPENSSL_cleanse(server_to_client.data(), server_to_client.size());
}

Key next_key(const Key& key) {
  Key next;
  if (!hkdf_sha256(key.data(), key.size(), nullptr, 0, reinterpret_cast<const uint8_t*>(kKeyUpdateLabel.data()),
                   kKeyUpdateLabel.size(), next.data(), next.size())) {
    throw std::runtime_error("libcrypto's HKDF failed deriving a connection's next key");
  }
  return next;
}

Result<Key> leaf_tag_key(const GroupSecret& secret, const LeafSalt& salt) {
  Key key;
  if (!hkdf_sha256(secret.bytes().data(), GroupSecret::kBytes, salt.data(), salt.size(),
                   reinterpret_cast<const uint8_t*>(kLeafTagLabel.data()), kLeafTagLabel.size(), key.data(),
                   key.size())) {
    return internal_error("libcrypto's HKDF failed deriving a leaf-tag key");
  }
  return key;
}

}  // namespace deltacast::trust
