#include "core/trust/protection.h"

#include <algorithm>

namespace deltacast::trust {

std::string_view protection_name(Protection mode) {
  switch (mode) {
    case Protection::kInsecure: return "insecure";
    case Protection::kAuthenticated: return "authenticated";
    case Protection::kEncrypted: return "encrypted";
  }
  return "unknown";
}

Result<Protection> parse_protection(std::string_view name) {
  for (Protection mode : {Protection::kInsecure, Protection::kAuthenticated, Protection::kEncrypted}) {
    if (name == protection_name(mode)) return mode;
  }
  return invalid_argument("protection '{}': give insecure, authenticated or encrypted", name);
}

Result<Protection> agree_protection(Protection mine, Protection theirs) {
  if (mine == theirs) return mine;
  if (mine == Protection::kInsecure || theirs == Protection::kInsecure) {
    // Insecure must be chosen on both ends: neither side lowers the other's protection.
    return permission_denied("the peer offers {}; this side requires {}", protection_name(theirs), protection_name(mine));
  }
  return std::max(mine, theirs);
}

}  // namespace deltacast::trust
