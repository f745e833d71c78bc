// What a connection protects after its handshake. Each end requires a mode; a session runs the
// stronger of two authenticated modes, and insecure only where both ends chose it.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace deltacast::trust {

enum class Protection : uint8_t {
  kInsecure = 0,       // benchmarks only: the handshake still proves the secret; frames carry no tag
  kAuthenticated = 1,  // default: every frame and slice carries a tag (AES-256-GCM's GMAC), payloads in clear
  kEncrypted = 2,      // payloads and control encrypted with AES-256-GCM
};

std::string_view protection_name(Protection mode);
Result<Protection> parse_protection(std::string_view name);

// The mode two ends run, or a refusal naming both modes ("the peer offers insecure; this side
// requires authenticated").
Result<Protection> agree_protection(Protection mine, Protection theirs);

}  // namespace deltacast::trust
