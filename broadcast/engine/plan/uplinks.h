// What each node's uplink feeds in a plan: the children on other nodes it sends a stripe to,
// over every stripe (members of one node share its rails; a child on the same node costs the
// uplink nothing). Every stripe's rate is set by the busiest uplink, so the planner keeps it
// from growing: where deaths' orphans go (orphans.h) and whom slow members hang from.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "broadcast/engine/plan/planner.h"

namespace deltacast {

// Each member's uplink as a small number: its node's (a member without one is a node of its own),
// 0 the producer's. Loads are then counted in an array: a re-plan at 65,536 members built and
// compared a node's name per member and stripe several times over.
class Uplinks {
 public:
  static constexpr int kProducer = 0;

  Uplinks(const Plan& plan, const NodeOf& nodes);
  int of(uint32_t id) const { return of_.at(id); }
  int count() const { return count_; }

 private:
  std::unordered_map<uint32_t, int> of_;
  int count_ = 1;  // 0 is the producer's
};

// Children each uplink feeds on other nodes, over every stripe (`plan`'s members are among
// those `uplinks` was made from).
std::vector<int> uplink_loads(const Plan& plan, const Uplinks& uplinks);
// The most of `loads` over the consumers' uplinks (the producer's not counted).
uint32_t busiest_of(const std::vector<int>& loads);
// The most children on other nodes any node's uplink feeds over the stripes (the producer's
// not counted): what every stripe's rate is set by.
uint32_t busiest_uplink(const Plan& plan, const NodeOf& nodes);

// `plan` with each slow member that enters its node from another one hung, in each stripe, from
// the healthy member of its parent's site, earlier in the stripe, whose uplink feeds the fewest
// (its parent as built where none feeds fewer). As built, a slow member hangs from the stripe's
// last healthy member: in chains that member forwards the other stripes and feeds the slow one
// instead of a next member, no more than anyone; in trees it may forward another stripe to its
// full fan-out, and its uplink, shared with the slow member, held its subtree back (1.2x in the
// simulator, 2x over real TCP with a member throttled to 30%).
void hang_slow_members_from_idle_uplinks(Plan& plan, const NodeOf& nodes, const SiteOf& sites);

}  // namespace deltacast
