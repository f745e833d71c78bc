// The trust of a test group: a secret made from a legacy 64-bit token, and the protection its
// ends require (authenticated unless given). One place, so every test builds it the same way.
#pragma once

#include <cstdint>

#include "core/trust/trust.h"

namespace deltacast::testing {

inline trust::Trust test_trust(uint64_t token, trust::Protection mode = trust::Protection::kAuthenticated) {
  trust::Trust t;
  t.secret = trust::GroupSecret::from_legacy_token(token);
  t.protection = mode;
  return t;
}

}  // namespace deltacast::testing
