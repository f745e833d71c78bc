// Whom one member (or the producer) forwards each stripe of a version to: children[s] lists the
// members that take stripe s from it (none: the stripe ends there). A chain gives each stripe one
// child at most, a tree several.
#pragma once

#include <cstdint>
#include <vector>

namespace deltacast {

using StripeChildren = std::vector<std::vector<uint32_t>>;

}  // namespace deltacast
