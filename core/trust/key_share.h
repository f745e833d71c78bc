// An ephemeral X25519 key pair (libcrypto) for one TCP connection's handshake: each end sends the
// public half right after its hello, both proofs cover both halves, and the session's keys come
// from the group secret together with the secret the two halves agree on. Whoever later learns
// the group secret, and holds a recording of the connection, still lacks the ephemeral private
// halves (never stored, never sent), so the recording stays sealed: forward secrecy for encrypted
// sessions. See docs/DESIGN.md, "Trust".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

namespace deltacast::trust {

inline constexpr size_t kShareBytes = 32;
using Share = std::array<uint8_t, kShareBytes>;
using SharedSecret = std::array<uint8_t, 32>;

class KeyShare {
 public:
  // A fresh key pair from the operating system's random source (an error if it fails).
  static Result<KeyShare> fresh();
  KeyShare(KeyShare&&) noexcept;
  KeyShare& operator=(KeyShare&&) noexcept;
  ~KeyShare();

  // The public half, as sent.
  const Share& share() const { return share_; }
  // The secret this pair and the peer's public half agree on. Refuses a peer half that gives an
  // all-zero secret (a point of small order: a peer, or someone on the way, forcing a known one).
  Result<SharedSecret> agree(const Share& peer) const;

 private:
  struct Pair;
  explicit KeyShare(std::unique_ptr<Pair> pair, const Share& share);
  std::unique_ptr<Pair> pair_;
  Share share_{};
};

// What an exchange adds to a handshake: both public halves (into both proofs) and the secret
// they agree on (into the session's keys).
struct Exchange {
  Share client{};
  Share server{};
  SharedSecret agreed{};
  ~Exchange();  // wipes `agreed`
};

}  // namespace deltacast::trust
