// The group's secret: 256 bits every member holds and no connection sends. Connections prove
// they hold it (trust/handshake.h) and derive their keys from it; it never leaves the process.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace deltacast::trust {

class GroupSecret {
 public:
  static constexpr size_t kBytes = 32;
  using Bytes = std::array<uint8_t, kBytes>;

  // No secret given: the legacy token 0, a value anyone knows (an open group, as before secrets).
  GroupSecret();

  // Exactly 32 bytes.
  static Result<GroupSecret> from_bytes(const void* data, size_t size);
  // 64 hexadecimal digits.
  static Result<GroupSecret> from_hex(std::string_view hex);
  // A passphrase stretched with PBKDF2-HMAC-SHA256 (kPassphraseRounds, a fixed salt: the same
  // passphrase gives the same secret on every member).
  static Result<GroupSecret> from_passphrase(std::string_view passphrase);
  // A file holding 32 raw bytes or 64 hexadecimal digits (surrounding whitespace ignored).
  static Result<GroupSecret> from_file(const std::string& path);
  // Legacy: the 64-bit integer token of earlier versions, hashed to 256 bits. Guessable by
  // anyone who records a handshake and tries 2^64 values; kept so old scripts still run.
  static GroupSecret from_legacy_token(uint64_t token);
  // One text for command lines and the environment: "hex:<64 digits>", "file:<path>",
  // "env:<NAME>" (the variable holds any of these forms), "pass:<passphrase>", or an unsigned
  // integer (legacy token, decimal or 0x-hex), also as "legacy:<integer>".
  static Result<GroupSecret> parse(std::string_view spec);

  static constexpr int kPassphraseRounds = 200000;

  const Bytes& bytes() const { return bytes_; }
  // A short name for logs and metrics that reveals nothing of the secret (SHA-256 of a label
  // and the secret, 8 hex digits).
  std::string fingerprint() const;
  bool operator==(const GroupSecret& other) const;  // constant time
  bool operator!=(const GroupSecret& other) const { return !(*this == other); }

 private:
  explicit GroupSecret(const Bytes& bytes) : bytes_(bytes) {}
  Bytes bytes_{};
};

}  // namespace deltacast::trust
