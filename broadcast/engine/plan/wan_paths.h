// What each relay is told of the ways into its children in other sites: the WAN into each such
// child's site as the round last measured it (RateBook::wan_into), shared among the plan's links
// into that site. A relay's new sprayer to a child across a WAN starts from it; without it, the
// sprayer starts at the rate of its LAN siblings with a queue target's worth of it in flight, a
// twentieth of what a long round trip holds, and grows from there about 1.3x a round trip (a
// site cut off took its detour 1.8 s for what the WAN carries in 0.32).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/engine/plan/stripe_children.h"
#include "broadcast/transport/rail_estimator.h"

namespace deltacast {

// Per parent (its children per stripe in `children_by_parent`; the producer is kProducerSender),
// the path into each child whose site (`site`) is not the parent's: the rate the book measured into
// that site divided among the plan's links into it, and its round trip. Children in their parent's
// site, and sites with nothing measured, are left out.
std::map<uint32_t, std::map<uint32_t, PathEstimate>> wan_paths(
    const RateBook& book, const std::map<uint32_t, StripeChildren>& children_by_parent,
    const std::function<std::string(uint32_t)>& site);

}  // namespace deltacast
