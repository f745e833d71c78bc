// AES-256-GCM through Intel's multi-buffer crypto library (ipsec-mb), whose direct GCM and GMAC
// functions use VAES and VPCLMULQDQ where the CPU has them. Built where the library was found
// (DELTACAST_HAVE_IPSEC_MB); elsewhere make_ipsec_mb_aes_gcm answers null.
#include "core/trust/aes_gcm.h"

#if DELTACAST_HAVE_IPSEC_MB

#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>

#include <cstring>

namespace deltacast::trust {
namespace {

// One manager for the process, made once: the direct GCM and GMAC calls only read its table of
// functions for this CPU (key and message state live in the caller's structures), so every thread
// may call through it at once.
const IMB_MGR* manager() {
  static const IMB_MGR* made = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) return static_cast<IMB_MGR*>(nullptr);
    IMB_ARCH arch = IMB_ARCH_NONE;
    init_mb_mgr_auto(m, &arch);
    // Without AES-NI the library falls back to table code slower than OpenSSL's: not worth it.
    if (arch <= IMB_ARCH_NOAESNI || imb_get_errno(m) != 0) {
      free_mb_mgr(m);
      return static_cast<IMB_MGR*>(nullptr);
    }
    return m;
  }();
  return made;
}

class IpsecMbAesGcm final : public AesGcm {
 public:
  explicit IpsecMbAesGcm(const Key& key) : mgr_(const_cast<IMB_MGR*>(manager())) {
    IMB_AES256_GCM_PRE(mgr_, key.data(), &state_->key);
  }
  ~IpsecMbAesGcm() override { OPENSSL_cleanse(state_.get(), sizeof(State)); }

  void start(bool sealing, const uint8_t iv[kIvBytes], const uint8_t* header, size_t header_size,
             Payload payload) override {
    sealing_ = sealing;
    payload_ = payload;
    if (payload == Payload::kTagged) {
      // GMAC: the header and the payload, one stream of associated data.
      IMB_AES256_GMAC_INIT(mgr_, &state_->key, &state_->message, iv, kIvBytes);
      if (header_size > 0) IMB_AES256_GMAC_UPDATE(mgr_, &state_->key, &state_->message, header, header_size);
    } else {
      IMB_AES256_GCM_INIT_VAR_IV(mgr_, &state_->key, &state_->message, iv, kIvBytes, header, header_size);
    }
  }

  void add(const uint8_t* in, uint8_t* out, size_t size) override {
    if (size == 0) return;
    if (payload_ == Payload::kTagged) {
      IMB_AES256_GMAC_UPDATE(mgr_, &state_->key, &state_->message, in, size);
    } else if (sealing_) {
      IMB_AES256_GCM_ENC_UPDATE(mgr_, &state_->key, &state_->message, out, in, size);
    } else {
      IMB_AES256_GCM_DEC_UPDATE(mgr_, &state_->key, &state_->message, out, in, size);
    }
  }

  void tag(uint8_t out[kTagBytes]) override { finalize(out); }

  bool verify(const uint8_t tag[kTagBytes]) override {
    // Fails closed: a finalize the library refused (it writes nothing then) leaves a tag that
    // differs from the one offered in every byte.
    uint8_t expected[kTagBytes];
    for (size_t i = 0; i < kTagBytes; ++i) expected[i] = static_cast<uint8_t>(~tag[i]);
    finalize(expected);
    const bool right = CRYPTO_memcmp(expected, tag, kTagBytes) == 0;
    OPENSSL_cleanse(expected, kTagBytes);
    return right;
  }

 private:
  void finalize(uint8_t out[kTagBytes]) {
    if (payload_ == Payload::kTagged) {
      IMB_AES256_GMAC_FINALIZE(mgr_, &state_->key, &state_->message, out, kTagBytes);
    } else if (sealing_) {
      IMB_AES256_GCM_ENC_FINALIZE(mgr_, &state_->key, &state_->message, out, kTagBytes);
    } else {
      IMB_AES256_GCM_DEC_FINALIZE(mgr_, &state_->key, &state_->message, out, kTagBytes);
    }
  }

  // The library wants both 64-byte aligned.
  struct State {
    alignas(64) gcm_key_data key;
    alignas(64) gcm_context_data message;
  };
  IMB_MGR* mgr_;
  std::unique_ptr<State> state_ = std::make_unique<State>();
  bool sealing_ = true;
  Payload payload_ = Payload::kTagged;
};

}  // namespace

bool ipsec_mb_usable() { return manager() != nullptr; }

std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key& key) {
  if (!ipsec_mb_usable()) return nullptr;
  return std::make_unique<IpsecMbAesGcm>(key);
}

}  // namespace deltacast::trust

#else

namespace deltacast::trust {

bool ipsec_mb_usable() { return false; }
std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key&) { return nullptr; }

}  // namespace deltacast::trust

#endif
