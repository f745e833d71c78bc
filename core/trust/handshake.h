// The mutual challenge-response every connection starts with, as bytes (no I/O here: the
// transport and the control link drive it over their sockets).
//
//   client -> server  HELLO (its mode, the connection's purpose, a fresh 32-byte nonce) [| SHARE]
//   server -> client  HELLO [| SHARE], then PROOF_server
//   client -> server  PROOF_client
//
// PROOF = HMAC-SHA256(secret, label | role | client HELLO | server HELLO [| both SHAREs]): each
// side proves it holds the secret over both sides' fresh nonces, so a recorded proof fits no later
// connection and neither proof says anything of the secret. Both ends then derive the session's
// two keys (one per direction) with HKDF-SHA256 from the secret [and the secret the two SHAREs
// agree on], salted with both nonces and bound to the purpose and the agreed mode. TCP
// connections exchange SHAREs (ephemeral X25519 halves, key_share.h: forward secrecy); RDMA's
// connection manager has no room for them in its connect request, and its rails only tag. See
// docs/DESIGN.md, "Trust".
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "core/trust/group_secret.h"
#include "core/trust/key_share.h"
#include "core/trust/protection.h"
#include "core/trust/trust.h"

namespace deltacast::trust {

// What the connection carries: a proof or a key for one purpose is worth nothing for another.
enum class Purpose : uint8_t {
  kControl = 1,      // a member's control link to the producer
  kData = 2,         // a rail's data channel (slices)
  kCoordinator = 3,  // a request to a group coordinator
};
std::string_view purpose_name(Purpose purpose);

enum class Role : uint8_t { kClient = 1, kServer = 2 };

inline constexpr uint32_t kHelloMagic = 0x31414344;  // "DCA1"
// 2: sessions move to the next key every kRekeyAfterBytes (trust.h, frame_seal.h); a version-1 peer would
// not, so it is refused at its hello, naming the version.
inline constexpr uint8_t kHandshakeVersion = 2;
inline constexpr size_t kNonceBytes = 32;
// u32 magic | u8 version | u8 mode | u8 purpose | u8 log2 of the key-update mark | nonce
inline constexpr size_t kHelloBytes = 40;
inline constexpr size_t kProofBytes = 32;
inline constexpr size_t kKeyBytes = 32;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;
using Key = std::array<uint8_t, kKeyBytes>;

struct Hello {
  Protection mode = Protection::kAuthenticated;
  Purpose purpose = Purpose::kControl;
  uint8_t rekey_log2 = kRekeyAfterLog2;  // the bytes a direction seals under one key, as a power of two
  Nonce nonce{};
};

// The power of two `rekey_after_bytes` is (Trust::rekey_after_bytes), or a refusal naming it.
Result<uint8_t> rekey_mark_log2(uint64_t rekey_after_bytes);

// A hello with a nonce fresh from the operating system's random source (an error if it fails:
// there is no weaker fallback).
Result<Hello> fresh_hello(Protection mode, Purpose purpose, uint8_t rekey_log2 = kRekeyAfterLog2);
void encode_hello(const Hello& hello, uint8_t out[kHelloBytes]);
// Refuses other magic (a peer without authentication: an older deltacast, or not deltacast at
// all), another version, and fields out of range, saying which.
Result<Hello> decode_hello(const uint8_t* bytes, size_t size);

// The proof `role` sends over the two hellos.
// With an `exchange` (TCP connections: key_share.h), both public halves are covered too.
Proof prove(const GroupSecret& secret, Role role, const Hello& client, const Hello& server,
            const Exchange* exchange = nullptr);
// Whether `received` is the proof `role` owes (compared in constant time).
bool proof_is_right(const GroupSecret& secret, Role role, const Hello& client, const Hello& server,
                    const uint8_t received[kProofBytes], const Exchange* exchange = nullptr);

// The terms both ends check once both hellos are known, worded the same on every transport:
// the same purpose (`self` says which end asks, so each names the mix-up its way), the same
// key-update mark, then the mode the two run (agree_protection).
Result<Protection> agree_terms(Role self, Protection required, const Hello& client, const Hello& server);
// Whether `received` is the proof `prover` owes; a refusal says "wrong secret" and names the
// other causes a failed proof has (a handshake replayed or altered on the way).
Status check_proof(const GroupSecret& secret, Role prover, const Hello& client, const Hello& server,
                   const uint8_t received[kProofBytes], const Exchange* exchange = nullptr);

struct SessionKeys {
  Key client_to_server{};
  Key server_to_client{};
  Protection mode = Protection::kAuthenticated;
  uint64_t rekey_after_bytes = kRekeyAfterBytes;  // Trust::rekey_after_bytes
  ~SessionKeys();                                 // wipes both keys
};
// Both directions' keys for the agreed `mode` (the same on both ends).
// With an `exchange`, its agreed secret joins the group secret as HKDF's input key, so the keys
// need the connection's ephemeral halves as well as the group secret (forward secrecy).
Result<SessionKeys> derive_keys(const GroupSecret& secret, const Hello& client, const Hello& server, Protection mode,
                                const Exchange* exchange = nullptr);
// A direction's key after a key update: HKDF-SHA256's expansion of the current key under a label
// of its own (one-way: a key that leaks says nothing of the ones before it). Throws
// std::runtime_error if libcrypto fails.
Key next_key(const Key& key);

// The key leaf tags are made under for one buffer (leaf_tag.h): HKDF-SHA256 of the group
// secret with the salt fresh for that buffer, under a label of its own. Every member derives it; no one
// without the secret can. An error if libcrypto fails.
inline constexpr size_t kLeafSaltBytes = 16;
using LeafSalt = std::array<uint8_t, kLeafSaltBytes>;
Result<Key> leaf_tag_key(const GroupSecret& secret, const LeafSalt& salt);

}  // namespace deltacast::trust
