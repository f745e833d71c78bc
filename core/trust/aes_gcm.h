// AES-256-GCM for one key, one message at a time, its payload given in pieces: the computation
// behind every sealed frame (frame_seal.h). Two libraries implement it with the same bytes out:
// OpenSSL's libcrypto, everywhere, and Intel's multi-buffer crypto library (ipsec-mb) where it
// was built in and the CPU has AES-NI, whose GHASH and AES use the wide vector instructions
// (VAES, VPCLMULQDQ) that OpenSSL 3.0 leaves unused: on an AVX-512 Xeon, in cache, 2.4-2.6x the
// GMAC rate and 2.7-2.8x the AES-GCM rate of OpenSSL 3.0 (`deltacast-bench seal` measures both
// on any machine). Either end may use either: the wire is the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/trust/handshake.h"

namespace deltacast::trust {

enum class AesGcmLibrary : uint8_t {
  kOpenSsl = 0,
  kIpsecMb = 1,
};

std::string_view aes_gcm_library_name(AesGcmLibrary library);
// "openssl", "ipsec-mb"; "auto" is the preferred one this process can use.
Result<AesGcmLibrary> parse_aes_gcm_library(std::string_view name);
// The libraries this build and this CPU can use, preferred first: ipsec-mb where usable (faster
// wherever it was measured; `deltacast-bench seal` compares them on this machine), OpenSSL always,
// last.
std::vector<AesGcmLibrary> usable_aes_gcm_libraries();

// What new seals use: the preferred usable one, unless DELTACAST_AES_GCM (a name above) or
// set_aes_gcm_library chose another (a seal keeps the library it was made with). A library that is
// not usable is refused, naming why.
AesGcmLibrary aes_gcm_library();
std::string_view aes_gcm_library_name();  // aes_gcm_library()'s name
Status set_aes_gcm_library(AesGcmLibrary library);

class AesGcm {
 public:
  static constexpr size_t kIvBytes = 12;
  static constexpr size_t kTagBytes = 16;

  virtual ~AesGcm() = default;

  // A message's payload is either encrypted (or decrypted, opening) or, in `kTagged`, only
  // authenticated as associated data after the header (GMAC: no bytes change).
  enum class Payload : uint8_t { kTagged, kEncrypted };
  // Begins a message: `sealing` computes its tag (tag()); otherwise it is opened and checked
  // (verify()). The header is associated data.
  virtual void start(bool sealing, const uint8_t iv[kIvBytes], const uint8_t* header, size_t header_size,
                     Payload payload) = 0;
  // The payload's next piece: encrypted or decrypted from `in` into `out` (which may equal `in`),
  // or in `kTagged` read from `in` only.
  virtual void add(const uint8_t* in, uint8_t* out, size_t size) = 0;
  // Sealing: the message's tag.
  virtual void tag(uint8_t out[kTagBytes]) = 0;
  // Opening: whether `tag` is the message's, compared in constant time.
  virtual bool verify(const uint8_t tag[kTagBytes]) = 0;
};

// Throws std::invalid_argument for a library this process cannot use.
std::unique_ptr<AesGcm> make_aes_gcm(const Key& key, AesGcmLibrary library);
std::unique_ptr<AesGcm> make_aes_gcm(const Key& key);  // aes_gcm_library()

// The two implementations (aes_gcm_openssl.cc, aes_gcm_ipsec_mb.cc); make_aes_gcm picks.
std::unique_ptr<AesGcm> make_openssl_aes_gcm(const Key& key);
// Null where this build has no ipsec-mb or the CPU lacks AES-NI. The library's widest code path
// this CPU runs.
std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key& key);
bool ipsec_mb_built_in();
bool ipsec_mb_usable();
// ipsec-mb's code paths this CPU runs ("sse", "avx", "avx2", "avx512"), narrowest first, and one
// of them by name (null if it is not among them): each is a separate implementation of GCM and
// GMAC in the library, and the tests hold every one to libcrypto's output.
std::vector<std::string> ipsec_mb_code_paths();
std::unique_ptr<AesGcm> make_ipsec_mb_aes_gcm(const Key& key, std::string_view code_path);

}  // namespace deltacast::trust
