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
// producer: than it did in `before`) leaves it, with its subtree, for a member of the new
// parent's site (no more WAN crossings), neither slow nor below a slow member, not below the
// orphan itself:
// - one whose uplink feeds fewer, the shallowest such (the dead member's node-mate, which took
//   its place, when it has one), where the orphan lands no deeper than it was as built;
// - failing that, it is passed down: it goes, no deeper than it was, below a member whose
//   uplink is full, one of whose children on other nodes with a shorter subtree leaves in its
//   place, the same way (preferring one that rose when its ancestor died, so it sinks back to
//   where it was), until one finds a member with room where it lands no deeper than it was;
// - failing that (the orphan, or the last one passed down, which then sinks with its subtree),
//   below the shallowest member with room where its subtree stays within twice `before`'s
//   depth; failing that, it stays (a pass is undone).
// Members of one node share one uplink (children on their own node cost it nothing); an orphan
// on its dead parent's node stays, in its place. The orphans with the shortest subtrees move
// first (the tallest stays where it was); each stripe keeps its order but for the moved
// subtrees, which follow their new parents.
// `after`'s members are among `before`'s (without_members makes it so).
void spread_orphans(const Plan& before, const std::vector<uint32_t>& dropped, const NodeOf& nodes, const SiteOf& sites,
                    Plan& after);

}  // namespace deltacast
