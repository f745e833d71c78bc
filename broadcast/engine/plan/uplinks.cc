#include "broadcast/engine/plan/uplinks.h"

#include <algorithm>
#include <set>
#include <string>

namespace deltacast {

Uplinks::Uplinks(const Plan& plan, const NodeOf& nodes) {
  std::unordered_map<std::string, int> node_index;
  for (const auto& order : plan.order) {
    for (uint32_t id : order) {
      if (of_.count(id)) continue;
      const auto node = nodes.find(id);
      if (node == nodes.end()) {
        of_[id] = count_++;
        continue;
      }
      const auto [named, added] = node_index.try_emplace(node->second, count_);
      of_[id] = named->second;
      count_ += added ? 1 : 0;
    }
  }
}

std::vector<int> uplink_loads(const Plan& plan, const Uplinks& uplinks) {
  std::vector<int> loads(uplinks.count(), 0);
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    const auto& from = plan.fed_by[s];
    for (size_t i = 0; i < order.size(); ++i) {
      const int parent = from[i] == Plan::kFromProducer ? Uplinks::kProducer : uplinks.of(order[from[i]]);
      if (parent != uplinks.of(order[i])) ++loads[parent];
    }
  }
  return loads;
}

uint32_t busiest_of(const std::vector<int>& loads) {
  int busiest = 0;
  for (size_t u = 1; u < loads.size(); ++u) busiest = std::max(busiest, loads[u]);
  return static_cast<uint32_t>(busiest);
}

uint32_t busiest_uplink(const Plan& plan, const NodeOf& nodes) { return busiest_of(uplink_loads(plan, Uplinks(plan, nodes))); }

void hang_slow_members_from_idle_uplinks(Plan& plan, const NodeOf& nodes, const SiteOf& sites) {
  if (plan.slow.empty()) return;
  const std::set<uint32_t> slow(plan.slow.begin(), plan.slow.end());
  const Uplinks uplinks(plan, nodes);
  std::vector<int> load = uplink_loads(plan, uplinks);
  // Sites as small numbers (a plan of 65,536 members scans a stripe per slow entry).
  std::unordered_map<std::string, int> site_ids;
  std::unordered_map<uint32_t, int> site_of_member;
  for (const auto& order : plan.order) {
    for (uint32_t id : order) {
      if (site_of_member.count(id)) continue;
      site_of_member[id] = site_ids.try_emplace(site_of(sites, id), static_cast<int>(site_ids.size())).first->second;
    }
  }
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    auto& from = plan.fed_by[s];
    // Per position: its uplink, its site, and whether it may feed a slow member (healthy).
    std::vector<int> uplink(order.size()), site(order.size());
    std::vector<bool> healthy(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      uplink[i] = uplinks.of(order[i]);
      site[i] = site_of_member.at(order[i]);
      healthy[i] = !slow.count(order[i]);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      if (healthy[i] || from[i] == Plan::kFromProducer) continue;
      const uint32_t parent = from[i];
      // Only a member entering its node from a healthy one: behind its node's own member
      // (loopback) it costs no uplink, and below a slow member it is in that one's heap.
      if (!healthy[parent] || uplink[parent] == uplink[i]) continue;
      // The least fed uplink in the parent's site; of equals the latest (the deeper, the likelier
      // a leaf in this stripe). Moved only where that lowers what the two uplinks feed at most.
      uint32_t best = parent;
      for (uint32_t j = 0; j < i; ++j) {
        if (!healthy[j] || uplink[j] == uplink[i] || site[j] != site[parent] || j == parent) continue;
        if (best == parent || load[uplink[j]] <= load[uplink[best]]) best = j;
      }
      if (best == parent || load[uplink[best]] + 1 >= load[uplink[parent]]) continue;
      --load[uplink[parent]];
      ++load[uplink[best]];
      from[i] = best;
    }
  }
}

}  // namespace deltacast
