// What every connection of a group is set up with: the group's secret and the protection this
// end requires (see protection.h for how two ends agree).
#pragma once

#include <cstdint>

#include "core/trust/group_secret.h"
#include "core/trust/protection.h"

namespace deltacast::trust {

// A direction's bytes (payloads, headers and tags) sealed under one key before both ends move to
// the next (FrameSeal): 2^38, 256 GiB. It keeps an encrypted direction's confidentiality bound for
// AES-GCM, about (16-byte blocks + frames)^2 / 2^129, at 2^-61 (each frame's tag is counted, so
// blocks + frames stay under 2^34); a 400 Gbit/s rail sends that much in six seconds, and a
// session may last days.
inline constexpr uint8_t kRekeyAfterLog2 = 38;
inline constexpr uint64_t kRekeyAfterBytes = uint64_t{1} << kRekeyAfterLog2;

struct Trust {
  GroupSecret secret;  // default: no secret (the legacy token 0, an open group)
  Protection protection = Protection::kAuthenticated;
  // A protocol constant, which tests lower to cross many key updates in a short transfer: a power
  // of two from 2^10 to 2^62. Each hello says it, and a peer with another is refused naming both.
  uint64_t rekey_after_bytes = kRekeyAfterBytes;
};

}  // namespace deltacast::trust
