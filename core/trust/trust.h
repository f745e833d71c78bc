// What every connection of a group is set up with: the group's secret and the protection this
// end requires (see protection.h for how two ends agree).
#pragma once

#include "core/trust/group_secret.h"
#include "core/trust/protection.h"

namespace deltacast::trust {

struct Trust {
  GroupSecret secret;  // default: no secret (the legacy token 0, an open group)
  Protection protection = Protection::kAuthenticated;
};

}  // namespace deltacast::trust
