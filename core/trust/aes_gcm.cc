#include "core/trust/aes_gcm.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "core/log.h"

namespace deltacast::trust {
namespace {

bool usable(AesGcmLibrary library) { return library == AesGcmLibrary::kOpenSsl || ipsec_mb_usable(); }

Status why_unusable(AesGcmLibrary library) {
  return failed_precondition(
      "AES-GCM library {} is not usable here: this build has no ipsec-mb (libipsec-mb-dev) or the CPU lacks AES-NI",
      aes_gcm_library_name(library));
}

// The process's choice: the environment's, else the preferred usable one. Read once, on first
// use. A name that cannot be used is said and passed over: the bytes on the wire are the same
// either way.
AesGcmLibrary initial_choice() {
  const AesGcmLibrary preferred = usable_aes_gcm_libraries().front();
  const char* named = std::getenv("DELTACAST_AES_GCM");
  if (named == nullptr || *named == '\0') return preferred;
  Result<AesGcmLibrary> parsed = parse_aes_gcm_library(named);
  Status refused = parsed.ok() ? (usable(*parsed) ? Status() : why_unusable(*parsed)) : parsed.status();
  if (refused.ok()) return *parsed;
  log().warn("DELTACAST_AES_GCM: {}; using {}", refused.message(), aes_gcm_library_name(preferred));
  return preferred;
}

std::atomic<AesGcmLibrary>& choice() {
  static std::atomic<AesGcmLibrary> chosen{initial_choice()};
  return chosen;
}

}  // namespace

std::string_view aes_gcm_library_name(AesGcmLibrary library) {
  switch (library) {
    case AesGcmLibrary::kOpenSsl:
      return "openssl";
    case AesGcmLibrary::kIpsecMb:
      return "ipsec-mb";
  }
  return "unknown";
}

Result<AesGcmLibrary> parse_aes_gcm_library(std::string_view name) {
  if (name == "auto") return usable_aes_gcm_libraries().front();
  if (name == "openssl") return AesGcmLibrary::kOpenSsl;
  if (name == "ipsec-mb") return AesGcmLibrary::kIpsecMb;
  return invalid_argument("unknown AES-GCM library '{}' (openssl, ipsec-mb or auto)", name);
}

std::vector<AesGcmLibrary> usable_aes_gcm_libraries() {
  std::vector<AesGcmLibrary> out;
  if (ipsec_mb_usable()) out.push_back(AesGcmLibrary::kIpsecMb);
  out.push_back(AesGcmLibrary::kOpenSsl);
  return out;
}

AesGcmLibrary aes_gcm_library() { return choice().load(std::memory_order_relaxed); }

std::string_view aes_gcm_library_name() { return aes_gcm_library_name(aes_gcm_library()); }

Status set_aes_gcm_library(AesGcmLibrary library) {
  if (!usable(library)) return why_unusable(library);
  choice().store(library, std::memory_order_relaxed);
  return Status();
}

std::unique_ptr<AesGcm> make_aes_gcm(const Key& key, AesGcmLibrary library) {
  if (library == AesGcmLibrary::kIpsecMb) {
    if (auto made = make_ipsec_mb_aes_gcm(key)) return made;
    throw std::invalid_argument(why_unusable(library).message());
  }
  return make_openssl_aes_gcm(key);
}

std::unique_ptr<AesGcm> make_aes_gcm(const Key& key) { return make_aes_gcm(key, aes_gcm_library()); }

}  // namespace deltacast::trust
