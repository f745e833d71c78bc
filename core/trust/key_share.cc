#include "core/trust/key_share.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

namespace deltacast::trust {

struct KeyShare::Pair {
  EVP_PKEY* key = nullptr;
  ~Pair() { EVP_PKEY_free(key); }
};

KeyShare::KeyShare(std::unique_ptr<Pair> pair, const Share& share) : pair_(std::move(pair)), share_(share) {}
KeyShare::KeyShare(KeyShare&&) noexcept = default;
KeyShare& KeyShare::operator=(KeyShare&&) noexcept = default;
KeyShare::~KeyShare() = default;

Result<KeyShare> KeyShare::fresh() {
  auto pair = std::make_unique<Pair>();
  pair->key = EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519");
  if (pair->key == nullptr) return internal_error("handshake: libcrypto made no X25519 key pair");
  Share share{};
  size_t length = share.size();
  if (EVP_PKEY_get_raw_public_key(pair->key, share.data(), &length) != 1 || length != share.size()) {
    return internal_error("handshake: libcrypto gave no X25519 public key");
  }
  return KeyShare(std::move(pair), share);
}

Result<SharedSecret> KeyShare::agree(const Share& peer) const {
  EVP_PKEY* theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer.data(), peer.size());
  if (theirs == nullptr) return permission_denied("handshake: the peer's key share is not an X25519 public key");
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new(pair_->key, nullptr);
  if (ctx == nullptr || EVP_PKEY_derive_init(ctx) != 1) {
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(theirs);
    return internal_error("handshake: libcrypto could not start an X25519 agreement");
  }
  SharedSecret agreed{};
  size_t length = agreed.size();
  // What fails from here on is the peer's half: libcrypto refuses an all-zero result itself, and
  // the check below does not depend on that.
  const bool derived = EVP_PKEY_derive_set_peer(ctx, theirs) == 1 &&
                       EVP_PKEY_derive(ctx, agreed.data(), &length) == 1 && length == agreed.size();
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(theirs);
  static const SharedSecret kZero{};
  if (!derived || CRYPTO_memcmp(agreed.data(), kZero.data(), agreed.size()) == 0) {
    OPENSSL_cleanse(agreed.data(), agreed.size());
    return permission_denied("handshake: the peer's key share agrees on no secret (a point of small order)");
  }
  return agreed;
}

Exchange::~Exchange() { OPENSSL_cleanse(agreed.data(), agreed.size()); }

}  // namespace deltacast::trust
