// AES-256-GCM through OpenSSL's EVP interface: the implementation every build has.
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "core/trust/aes_gcm.h"

namespace deltacast::trust {
namespace {

void require(int result, const char* what) {
  if (result != 1) throw std::runtime_error(std::string("libcrypto's AES-256-GCM failed: ") + what);
}

class OpenSslAesGcm final : public AesGcm {
 public:
  explicit OpenSslAesGcm(const Key& key) : key_(key), ctx_(EVP_CIPHER_CTX_new()) {
    // libcrypto makes no context only when memory runs out: the same failure as any allocation.
    if (ctx_ == nullptr) throw std::bad_alloc();
  }
  ~OpenSslAesGcm() override {
    EVP_CIPHER_CTX_free(ctx_);
    OPENSSL_cleanse(key_.data(), key_.size());
  }

  void start(bool sealing, const uint8_t iv[kIvBytes], const uint8_t* header, size_t header_size,
             Payload payload) override {
    sealing_ = sealing;
    payload_ = payload;
    const auto init = sealing ? EVP_EncryptInit_ex : EVP_DecryptInit_ex;
    // The key schedule is made once per direction; a message in the same direction sets only its IV.
    if (keyed_ && sealing == keyed_sealing_) {
      require(init(ctx_, nullptr, nullptr, nullptr, iv), "init");
    } else {
      require(init(ctx_, EVP_aes_256_gcm(), nullptr, key_.data(), iv), "init");
      keyed_ = true;
      keyed_sealing_ = sealing;
    }
    update(header, nullptr, header_size, "associated data");
  }

  void add(const uint8_t* in, uint8_t* out, size_t size) override {
    // A tagged payload is associated data: EVP takes it without an output.
    update(in, payload_ == Payload::kTagged ? nullptr : out, size, "payload");
  }

  void tag(uint8_t out[kTagBytes]) override {
    int len = 0;
    uint8_t rest[16];
    require(EVP_EncryptFinal_ex(ctx_, rest, &len), "final");
    require(EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kTagBytes, out), "tag");
  }

  bool verify(const uint8_t tag[kTagBytes]) override {
    uint8_t copy[kTagBytes];
    std::memcpy(copy, tag, kTagBytes);
    require(EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kTagBytes, copy), "tag");
    int len = 0;
    uint8_t rest[16];
    // EVP_DecryptFinal_ex compares the tags in constant time.
    return EVP_DecryptFinal_ex(ctx_, rest, &len) == 1;
  }

 private:
  static constexpr size_t kStep = size_t{1} << 30;  // EVP takes int lengths

  // `in` through EVP's update in steps it can take; `out` null for associated data.
  void update(const uint8_t* in, uint8_t* out, size_t size, const char* what) {
    const auto step = sealing_ ? EVP_EncryptUpdate : EVP_DecryptUpdate;
    for (size_t done = 0; done < size;) {
      const int n = static_cast<int>(std::min(kStep, size - done));
      int len = 0;
      require(step(ctx_, out == nullptr ? nullptr : out + done, &len, in + done, n), what);
      done += n;
    }
  }

  Key key_;
  EVP_CIPHER_CTX* ctx_;
  bool sealing_ = true;
  bool keyed_ = false;
  bool keyed_sealing_ = true;
  Payload payload_ = Payload::kTagged;
};

}  // namespace

std::unique_ptr<AesGcm> make_openssl_aes_gcm(const Key& key) { return std::make_unique<OpenSslAesGcm>(key); }

}  // namespace deltacast::trust
