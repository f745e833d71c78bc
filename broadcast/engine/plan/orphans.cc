#include "broadcast/engine/plan/orphans.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace deltacast {
namespace {

// The producer's uplink beside the nodes' (no node is named with a control character).
const std::string kProducerUplink = "\x01producer";

std::string uplink_of(const NodeOf& nodes, uint32_t id) {
  const auto it = nodes.find(id);
  return it != nodes.end() ? it->second : "\x01#" + std::to_string(id);  // a node of its own
}

// Children each uplink feeds on other nodes, over every stripe.
std::map<std::string, int> uplink_loads(const Plan& plan, const NodeOf& nodes) {
  std::map<std::string, int> loads;
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    const auto& from = plan.fed_by[s];
    for (size_t i = 0; i < order.size(); ++i) {
      const std::string parent = from[i] == Plan::kFromProducer ? kProducerUplink : uplink_of(nodes, order[from[i]]);
      if (parent != uplink_of(nodes, order[i])) ++loads[parent];
    }
  }
  return loads;
}

// One stripe's tree by position, while orphans move (a parent may then come after its child).
struct StripeTree {
  std::vector<uint32_t> parent;  // the parent's position, Plan::kFromProducer for a head

  uint32_t depth(uint32_t i) const {
    uint32_t hops = 1;
    for (uint32_t p = parent[i]; p != Plan::kFromProducer; p = parent[p]) ++hops;
    return hops;
  }
  // Whether j is i or below it.
  bool below(uint32_t j, uint32_t i) const {
    for (uint32_t p = j; p != Plan::kFromProducer; p = parent[p]) {
      if (p == i) return true;
    }
    return false;
  }
  // Hops from i down to the deepest member below it.
  uint32_t height(uint32_t i) const {
    const uint32_t own = depth(i);
    uint32_t deepest = own;
    for (uint32_t j = 0; j < parent.size(); ++j) {
      if (below(j, i)) deepest = std::max(deepest, depth(j));
    }
    return deepest - own;
  }
};

// Stripe s of `plan` listed anew from `tree`: everyone in the order they had, but a member whose
// parent comes later follows it (the plan's rule: parents first).
void relist(Plan& plan, uint32_t s, const StripeTree& tree) {
  const auto& order = plan.order[s];
  const size_t n = order.size();
  std::vector<uint32_t> at(n, Plan::kFromProducer);  // new positions (kFromProducer: not placed yet)
  std::vector<uint32_t> new_order, new_from;
  new_order.reserve(n);
  new_from.reserve(n);
  while (new_order.size() < n) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = tree.parent[i];
      if (at[i] != Plan::kFromProducer || (p != Plan::kFromProducer && at[p] == Plan::kFromProducer)) continue;
      at[i] = static_cast<uint32_t>(new_order.size());
      new_order.push_back(order[i]);
      new_from.push_back(p == Plan::kFromProducer ? Plan::kFromProducer : at[p]);
    }
  }
  plan.order[s] = std::move(new_order);
  plan.fed_by[s] = std::move(new_from);
}

}  // namespace

void spread_orphans(const Plan& before, const std::vector<uint32_t>& dropped, const NodeOf& nodes, const SiteOf& sites,
                    Plan& after) {
  if (dropped.empty() || after.stripes() != before.stripes()) return;
  const std::set<uint32_t> gone(dropped.begin(), dropped.end());
  const std::set<uint32_t> slow(after.slow.begin(), after.slow.end());
  // What an uplink may feed: what the busiest node's fed before (the rate every stripe ran at;
  // a node that fed fewer, a leaf, has room), and the producer what it fed before.
  const auto loads_before = uplink_loads(before, nodes);
  int busiest = 0;
  for (const auto& [uplink, load] : loads_before) {
    if (uplink != kProducerUplink) busiest = std::max(busiest, load);
  }
  std::map<std::string, int> load = uplink_loads(after, nodes);
  const auto room_of = [&](const std::string& uplink) {
    const auto fed = load.find(uplink);
    const int now = fed == load.end() ? 0 : fed->second;
    if (uplink != kProducerUplink) return busiest - now;
    const auto was = loads_before.find(uplink);
    return (was == loads_before.end() ? 0 : was->second) - now;
  };
  const uint32_t depth_limit = 2 * before.depth();
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    const auto& order = after.order[s];
    // The orphans: members whose parent in `before` died.
    std::unordered_map<uint32_t, uint32_t> old_parent;  // member -> its parent's id (0: the producer)
    const auto& old_order = before.order[s];
    for (size_t i = 0; i < old_order.size(); ++i) {
      const uint32_t f = before.fed_by[s][i];
      old_parent[old_order[i]] = f == Plan::kFromProducer ? 0 : old_order[f];
    }
    StripeTree tree{after.fed_by[s]};
    std::vector<std::pair<uint32_t, uint32_t>> orphans;  // (height, position)
    for (uint32_t i = 0; i < order.size(); ++i) {
      const auto it = old_parent.find(order[i]);
      // One on its dead parent's own node stays: it takes the dead member's place, and the node's
      // uplink, freed of the dead member's children, is where they go.
      if (it != old_parent.end() && it->second != 0 && gone.count(it->second) &&
          uplink_of(nodes, it->second) != uplink_of(nodes, order[i])) {
        orphans.emplace_back(tree.height(i), i);
      }
    }
    if (orphans.empty()) continue;
    std::sort(orphans.begin(), orphans.end());
    std::vector<std::string> uplinks, member_sites;
    for (uint32_t id : order) {
      uplinks.push_back(uplink_of(nodes, id));
      member_sites.push_back(site_of(sites, id));
    }
    bool moved = false;
    for (const auto& [shortest_first, i] : orphans) {
      const uint32_t p = tree.parent[i];
      const std::string& feeding = p == Plan::kFromProducer ? kProducerUplink : uplinks[p];
      if (feeding == uplinks[i] || room_of(feeding) >= 0) continue;
      const uint32_t height = tree.height(i);  // now: an orphan moved before may hang below it
      // From the same site as its parent now: the stripe crosses into the orphan's site as often as before.
      const std::string site = p == Plan::kFromProducer ? std::string() : member_sites[p];
      uint32_t best = Plan::kFromProducer, best_depth = 0;
      for (uint32_t j = 0; j < order.size(); ++j) {
        if (uplinks[j] == uplinks[i] || room_of(uplinks[j]) <= 0 || member_sites[j] != site || slow.count(order[j])) continue;
        const uint32_t d = tree.depth(j);
        if (d + 1 + height > depth_limit || (best != Plan::kFromProducer && d >= best_depth) || tree.below(j, i)) continue;
        best = j;
        best_depth = d;
      }
      if (best == Plan::kFromProducer) continue;
      tree.parent[i] = best;
      ++load[uplinks[best]];
      --load[feeding];
      moved = true;
    }
    if (moved) relist(after, s, tree);
  }
}

}  // namespace deltacast
