// Where the children of members that died go in a tree. Spliced to the nearest ancestor that
// stays (without_members), a dead member's k children load that ancestor's uplink with k - 1
// more than it carried: in chains k is 1 and nobody's load changes, but in trees every
// forwarding uplink was already full, so the whole subtree below slows down (1.09x at 1,024
// simulated consumers for one dead node, 1.29x at 8,192 for ten). The deaths also freed uplinks:
// every node that fed a dead member, in any stripe, carries one child less, and the nodes at
// the bottom of a tree fed fewer children than the busiest all along. The orphans that overload
// their new parent move to those, so no uplink carries more than the busiest did.
#pragma once

#include <cstdint>
#include <vector>

#include "broadcast/engine/plan/planner.h"

namespace deltacast {

// `after` is `before` without the members of `dropped`, each orphan fed by its nearest
// ancestor that stays. Each orphan whose new parent's uplink now feeds more children on other
// nodes than the busiest uplink did as built (`Plan::built_busiest`, else in `before`; the
// producer: than it did in `before`) moves, with its
// subtree, below a member whose uplink feeds fewer: of the new parent's site (no more WAN
// crossings), neither slow nor below a slow member, not below the orphan itself, the shallowest such (the dead member's
// node-mate, which took its place, when it has one), and only where the subtree stays within twice `before`'s depth. Members of one node share one uplink (children on
// their own node cost it nothing); an orphan on its dead parent's node stays, in its place. The
// orphans with the shortest subtrees move first (the tallest stays where it was); each stripe
// keeps its order but for the moved subtrees, which follow their new parents.
// The most children on other nodes any node's uplink feeds over the stripes (the producer's
// not counted): what every stripe's rate is set by.
uint32_t busiest_uplink(const Plan& plan, const NodeOf& nodes);

void spread_orphans(const Plan& before, const std::vector<uint32_t>& dropped, const NodeOf& nodes, const SiteOf& sites,
                    Plan& after);

}  // namespace deltacast
