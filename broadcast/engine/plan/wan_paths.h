// What each relay is told of the ways into its children in other sites: the WAN into each such
// child's site as the round last measured it (RateBook::wan_into), shared among the plan's links
// into that site. A relay's new sprayer to a child across a WAN starts from it; without it, the
// sprayer starts at a queue target's worth of its LAN siblings' rate in flight, a small part of
// what a WAN's round trip holds, and grows from there (a simulated site cut off in chains cost
// 1.5-1.7 s more than its detour's time, against 0.5 s with it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/engine/plan/stripe_children.h"
#include "broadcast/transport/rail_estimator.h"

namespace deltacast {

// Per parent, the path into each of its children across sites.
using WanPaths = std::map<uint32_t, std::map<uint32_t, PathEstimate>>;

// Per parent (its children per stripe in `children_by_parent`; the producer is kProducerSender),
// the path into each child whose site (`site`) is not the parent's: the rate the book measured into
// that site divided among the plan's links into it, and its round trip. Children in their parent's
// site, sites with nothing measured, and paths out of PathEstimate's bounds are left out.
WanPaths wan_paths(const RateBook& book, const std::map<uint32_t, StripeChildren>& children_by_parent,
                   const std::function<std::string(uint32_t)>& site);

// `parent`'s part of `paths` (none: empty).
const std::map<uint32_t, PathEstimate>& paths_from(const WanPaths& paths, uint32_t parent);

}  // namespace deltacast
