// AES-256-GCM through Intel's multi-buffer crypto library (ipsec-mb), whose direct GCM and GMAC
// functions use VAES and VPCLMULQDQ where the CPU has them. Built where the library was found
// (DELTACAST_HAVE_IPSEC_MB); elsewhere make_ipsec_mb_aes_gcm answers null.
#include "core/trust/aes_gcm.h"

#if DELTACAST_HAVE_IPSEC_MB

#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>

#include <array>
#include <cstring>
#include <stdexcept>

namespace deltacast::trust {
namespace {

// The library's code paths, each a separate implementation of GCM and GMAC: the tests compare
// every one this CPU runs with libcrypto, not only the one the library picks for itself.
struct CodePath {
  const char* name;
  uint64_t needs;  // CPU features (IMB_FEATURE_*)
  void (*init)(IMB_MGR*);
};
constexpr CodePath kCodePaths[] = {
    {"sse", IMB_CPUFLAGS_SSE, init_mb_mgr_sse},
    {"avx", IMB_CPUFLAGS_AVX, init_mb_mgr_avx},
    {"avx2", IMB_CPUFLAGS_AVX2, init_mb_mgr_avx2},
    {"avx512", IMB_CPUFLAGS_AVX512, init_mb_mgr_avx512},
};

// A manager made once per code path and kept for the process: the direct GCM and GMAC calls only
// read its table of functions (key and message state live in the caller's structures), so every
// thread may call through it at once. Null where the CPU cannot run the path.
const IMB_MGR* manager_for(size_t path) {
  static const auto made = [] {
    std::array<IMB_MGR*, std::size(kCodePaths)> managers{};
    for (size_t p = 0; p < std::size(kCodePaths); ++p) {
      IMB_MGR* m = alloc_mb_mgr(0);  // detects the CPU's features into m->features
      if (m == nullptr) continue;
      if ((m->features & kCodePaths[p].needs) != kCodePaths[p].needs) {
        free_mb_mgr(m);
        continue;
      }
      kCodePaths[p].init(m);
      if (imb_get_errno(m) != 0) {
        free_mb_mgr(m);
        continue;
      }
      managers[p] = m;
    }
    return managers;
  }();
  return made[path];
}

// The path the library picks for this CPU, as init_mb_mgr_auto would: the widest it can run.
// Without AES-NI there is none (its table code is slower than OpenSSL's: not worth it).
const IMB_MGR* manager() {
  for (size_t p = std::size(kCodePaths); p-- > 0;) {
    if (const IMB_MGR* m = manager_for(p)) return m;
  }
  return nullptr;
}

class IpsecMbAesGcm final : public AesGcm {
 public:
  IpsecMbAesGcm(const Key& key, const IMB_MGR* mgr) : mgr_(const_cast<IMB_MGR*>(mgr)) {
    IMB_AES256_GCM_PRE(mgr_, key.data(), &state_->key);
  }
  ~IpsecMbAesGcm() override { OPENSSL_cleanse(state_.get(), sizeof(State)); }

  void start(bool sealing, const uint8_t iv[kIvBytes], const uint8_t* header, size_t header_size,
             Payload payload) override {
    sealing_ = sealing;
    payload_ = payload;
    payload_bytes_ = 0;
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
    // GCM's 32-bit block counter limits a message's encrypted payload (NIST SP 800-38D); past it the
    // keystream would repeat. libcrypto refuses the same way.
    if (payload_ == Payload::kEncrypted && size > kMaxEncryptedBytes - payload_bytes_) {
      throw std::length_error("AES-GCM: a message's encrypted payload is limited to 2^36 - 32 bytes");
    }
    payload_bytes_ += size;
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
  static constexpr uint64_t kMaxEncryptedBytes = (uint64_t{1} << 36) - 32;

  IMB_MGR* mgr_;
  std::unique_ptr<State> state_ = std::make_unique<State>();
  uint64_t payload_bytes_ = 0;
  bool sealing_ = true;
  Payload payload_ = Payload::kTagged;
};

}  // namespace

bool ipsec_mb_built_in() { return true; }

bool ipsec_mb_usable() { return manager() != nullptr; }

std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key& key) {
  const IMB_MGR* m = manager();
  if (m == nullptr) return nullptr;
  return std::make_unique<IpsecMbAesGcm>(key, m);
}

std::vector<std::string> ipsec_mb_code_paths() {
  std::vector<std::string> paths;
  for (size_t p = 0; p < std::size(kCodePaths); ++p) {
    if (manager_for(p) != nullptr) paths.emplace_back(kCodePaths[p].name);
  }
  return paths;
}

std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key& key, std::string_view code_path) {
  for (size_t p = 0; p < std::size(kCodePaths); ++p) {
    if (code_path != kCodePaths[p].name) continue;
    const IMB_MGR* m = manager_for(p);
    if (m == nullptr) break;
    return std::make_unique<IpsecMbAesGcm>(key, m);
  }
  return nullptr;
}

}  // namespace deltacast::trust

#else

namespace deltacast::trust {

bool ipsec_mb_built_in() { return false; }
bool ipsec_mb_usable() { return false; }
std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key&) { return nullptr; }
std::vector<std::string> ipsec_mb_code_paths() { return {}; }
std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key&, std::string_view) { return nullptr; }

}  // namespace deltacast::trust

#endif
