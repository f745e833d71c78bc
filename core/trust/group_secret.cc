#include "core/trust/group_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace deltacast::trust {
namespace {

constexpr std::string_view kPassphraseSalt = "deltacast group secret v1";
constexpr std::string_view kLegacyLabel = "deltacast legacy token v1";
constexpr std::string_view kFingerprintLabel = "deltacast secret fingerprint v1";

std::array<uint8_t, 32> sha256(std::string_view label, const void* data, size_t size) {
  std::array<uint8_t, 32> out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned int len = 0;
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, label.data(), label.size());
  EVP_DigestUpdate(ctx, data, size);
  EVP_DigestFinal_ex(ctx, out.data(), &len);
  EVP_MD_CTX_free(ctx);
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

Result<GroupSecret> parse_legacy(std::string_view digits) {
  const std::string text(digits);
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  if (text.empty() || text.find_first_not_of(hex ? "0123456789abcdefABCDEFxX" : "0123456789") != std::string::npos) {
    return invalid_argument("secret: give hex:<64 hex digits>, file:<path>, env:<NAME>, pass:<passphrase> or an "
                            "unsigned integer (legacy token)");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, hex ? 16 : 10);
  if (errno != 0 || end != text.c_str() + text.size()) {
    return invalid_argument("secret: the legacy token '{}' is not a 64-bit unsigned integer", text);
  }
  return GroupSecret::from_legacy_token(value);
}

}  // namespace

GroupSecret::GroupSecret() : GroupSecret(from_legacy_token(0)) {}

Result<GroupSecret> GroupSecret::from_bytes(const void* data, size_t size) {
  if (size != kBytes) return invalid_argument("secret: {} bytes given; a group secret is exactly {} bytes", size, kBytes);
  Bytes bytes{};
  std::copy_n(static_cast<const uint8_t*>(data), kBytes, bytes.begin());
  return GroupSecret(bytes);
}

Result<GroupSecret> GroupSecret::from_hex(std::string_view hex) {
  hex = trimmed(hex);
  if (hex.size() != 2 * kBytes) {
    return invalid_argument("secret: {} hex digits given; a group secret is {} hex digits", hex.size(), 2 * kBytes);
  }
  Bytes bytes{};
  for (size_t i = 0; i < kBytes; ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("secret: '{}' is not a hex digit", hex[hi < 0 ? 2 * i : 2 * i + 1]);
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return from_bytes(bytes.data(), bytes.size());
}

Result<GroupSecret> GroupSecret::from_passphrase(std::string_view passphrase) {
  if (passphrase.empty()) return invalid_argument("secret: the passphrase is empty");
  Bytes bytes{};
  if (PKCS5_PBKDF2_HMAC(passphrase.data(), static_cast<int>(passphrase.size()),
                        reinterpret_cast<const unsigned char*>(kPassphraseSalt.data()),
                        static_cast<int>(kPassphraseSalt.size()), kPassphraseRounds, EVP_sha256(),
                        static_cast<int>(bytes.size()), bytes.data()) != 1) {
    return internal_error("secret: PBKDF2 failed in libcrypto");
  }
  return from_bytes(bytes.data(), bytes.size());
}

Result<GroupSecret> GroupSecret::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("secret: cannot read the file '{}'", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() == kBytes) return from_bytes(text.data(), text.size());
  auto hex = from_hex(text);
  if (!hex.ok()) {
    return invalid_argument("secret: the file '{}' holds {} bytes; give {} raw bytes or {} hex digits", path,
                            text.size(), kBytes, 2 * kBytes);
  }
  return hex;
}

GroupSecret GroupSecret::from_legacy_token(uint64_t token) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(token >> (8 * i));
  return GroupSecret(sha256(kLegacyLabel, le, sizeof le));
}

Result<GroupSecret> GroupSecret::parse(std::string_view spec) {
  const auto take = [&](std::string_view prefix) {
    if (spec.substr(0, prefix.size()) != prefix) return false;
    spec.remove_prefix(prefix.size());
    return true;
  };
  if (take("hex:")) return from_hex(spec);
  if (take("file:")) return from_file(std::string(spec));
  if (take("pass:")) return from_passphrase(spec);
  if (take("legacy:")) return parse_legacy(trimmed(spec));
  if (take("env:")) {
    const char* value = std::getenv(std::string(spec).c_str());
    if (value == nullptr || *value == '\0') return not_found("secret: the environment variable {} is not set", spec);
    const std::string_view inner(value);
    if (inner.substr(0, 4) == "env:") return invalid_argument("secret: {} names another variable", spec);
    return parse(inner);
  }
  return parse_legacy(trimmed(spec));
}

std::string GroupSecret::fingerprint() const {
  const auto digest = sha256(kFingerprintLabel, bytes_.data(), bytes_.size());
  return fmt::format("{:02x}{:02x}{:02x}{:02x}", digest[0], digest[1], digest[2], digest[3]);
}

bool GroupSecret::operator==(const GroupSecret& other) const {
  return CRYPTO_memcmp(bytes_.data(), other.bytes_.data(), kBytes) == 0;
}

}  // namespace deltacast::trust
