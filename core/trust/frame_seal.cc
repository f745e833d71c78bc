#include "core/trust/frame_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "core/byte_io.h"

namespace deltacast::trust {

struct FrameSeal::Cipher {
  EVP_CIPHER_CTX* ctx = nullptr;
  Key key{};
  ~Cipher() {
    EVP_CIPHER_CTX_free(ctx);
    OPENSSL_cleanse(key.data(), key.size());
  }
};

namespace {

void require(int result, const char* what) {
  if (result != 1) throw std::runtime_error(std::string("libcrypto's AES-256-GCM failed: ") + what);
}

}  // namespace

FrameSeal::FrameSeal(const Key& key, Protection mode) : mode_(mode), cipher_(std::make_unique<Cipher>()) {
  cipher_->key = key;
  cipher_->ctx = EVP_CIPHER_CTX_new();
  // libcrypto makes no context only when memory runs out: the same failure as any allocation.
  if (cipher_->ctx == nullptr) throw std::bad_alloc();
}

FrameSeal::~FrameSeal() = default;

void FrameSeal::start(bool encrypting, uint64_t number, const void* header, size_t header_size) {
  if (broken_) throw std::logic_error("FrameSeal: a frame failed its tag; the connection must be dropped");
  encrypting_ = encrypting;
  if (mode_ == Protection::kInsecure) return;
  // The nonce: 4 zero bytes and the frame's sequence number. Each direction has its own key, so
  // no (key, nonce) pair is ever used twice.
  uint8_t iv[12] = {};
  store_le<uint64_t>(iv + 4, number);
  EVP_CIPHER_CTX* ctx = cipher_->ctx;
  const auto init = encrypting ? EVP_EncryptInit_ex : EVP_DecryptInit_ex;
  require(init(ctx, EVP_aes_256_gcm(), nullptr, cipher_->key.data(), iv), "init");
  int len = 0;
  if (header_size > 0) {
    const auto update = encrypting ? EVP_EncryptUpdate : EVP_DecryptUpdate;
    require(update(ctx, nullptr, &len, static_cast<const uint8_t*>(header), static_cast<int>(header_size)), "header");
  }
}

void FrameSeal::process(const void* in, void* out, size_t size) {
  if (mode_ == Protection::kInsecure || size == 0) {
    if (out != in && size > 0) std::memmove(out, in, size);
    return;
  }
  EVP_CIPHER_CTX* ctx = cipher_->ctx;
  const auto update = encrypting_ ? EVP_EncryptUpdate : EVP_DecryptUpdate;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  constexpr size_t kStep = size_t{1} << 30;  // EVP takes int lengths
  for (size_t done = 0; done < size;) {
    const int n = static_cast<int>(std::min(kStep, size - done));
    int len = 0;
    if (mode_ == Protection::kEncrypted) {
      require(update(ctx, dst + done, &len, src + done, n), "payload");
    } else {
      // Authenticated: the payload is associated data (tagged, not encrypted).
      require(update(ctx, nullptr, &len, src + done, n), "payload");
      if (dst != src) std::memmove(dst + done, src + done, n);
    }
    done += n;
  }
}

void FrameSeal::begin(const void* header, size_t header_size) { start(true, sequence_, header, header_size); }

void FrameSeal::add(const void* in, void* out, size_t size) { process(in, out, size); }

void FrameSeal::finish(uint8_t tag[kTagBytes]) {
  ++sequence_;
  if (mode_ == Protection::kInsecure) return;
  int len = 0;
  uint8_t rest[16];
  require(EVP_EncryptFinal_ex(cipher_->ctx, rest, &len), "final");
  require(EVP_CIPHER_CTX_ctrl(cipher_->ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag), "tag");
}

void FrameSeal::begin_open(const void* header, size_t header_size) { start(false, sequence_, header, header_size); }

void FrameSeal::add_open(const void* in, void* out, size_t size) { process(in, out, size); }

bool FrameSeal::check(const uint8_t tag[kTagBytes]) {
  ++sequence_;
  return verify(tag);
}

bool FrameSeal::verify(const uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kInsecure) return true;
  uint8_t copy[kTagBytes];
  std::memcpy(copy, tag, kTagBytes);
  require(EVP_CIPHER_CTX_ctrl(cipher_->ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, copy), "tag");
  int len = 0;
  uint8_t rest[16];
  // EVP_DecryptFinal_ex compares the tags in constant time.
  const bool right = EVP_DecryptFinal_ex(cipher_->ctx, rest, &len) == 1;
  if (!right) broken_ = true;
  return right;
}

void FrameSeal::seal(const void* header, size_t header_size, uint8_t* payload, size_t size, uint8_t tag[kTagBytes]) {
  begin(header, header_size);
  add(payload, payload, size);
  finish(tag);
}

bool FrameSeal::open(const void* header, size_t header_size, uint8_t* payload, size_t size,
                     const uint8_t tag[kTagBytes]) {
  begin_open(header, header_size);
  add_open(payload, payload, size);
  return check(tag);
}

void FrameSeal::tag_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload,
                             size_t size, uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kEncrypted) throw std::logic_error("FrameSeal: numbered frames are tagged, not encrypted");
  start(true, number, header, header_size);
  process(payload, const_cast<uint8_t*>(payload), size);  // tagged only: nothing is written
  if (mode_ == Protection::kInsecure) return;
  int len = 0;
  uint8_t rest[16];
  require(EVP_EncryptFinal_ex(cipher_->ctx, rest, &len), "final");
  require(EVP_CIPHER_CTX_ctrl(cipher_->ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag), "tag");
}

bool FrameSeal::check_numbered(uint64_t number, const void* header, size_t header_size, const uint8_t* payload,
                               size_t size, const uint8_t tag[kTagBytes]) {
  if (mode_ == Protection::kEncrypted) throw std::logic_error("FrameSeal: numbered frames are tagged, not encrypted");
  start(false, number, header, header_size);
  process(payload, const_cast<uint8_t*>(payload), size);
  return verify(tag);
}

SessionSeals seals_for(const SessionKeys& keys, Role role) {
  SessionSeals seals;
  const bool client = role == Role::kClient;
  seals.outgoing = std::make_unique<FrameSeal>(client ? keys.client_to_server : keys.server_to_client, keys.mode);
  seals.incoming = std::make_unique<FrameSeal>(client ? keys.server_to_client : keys.client_to_server, keys.mode);
  return seals;
}

}  // namespace deltacast::trust
