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
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    auto& from = plan.fed_by[s];
    for (size_t i = 0; i < order.size(); ++i) {
      if (!slow.count(order[i]) || from[i] == Plan::kFromProducer) continue;
      const uint32_t parent = from[i];
      const int own = uplinks.of(order[i]);
      // Only a member entering its node: a slow member behind its node's own (loopback) costs no uplink.
      if (slow.count(order[parent]) || uplinks.of(order[parent]) == own) continue;
      const std::string site = site_of(sites, order[parent]);
      uint32_t best = parent;
      for (uint32_t j = 0; j < i; ++j) {
        const int u = uplinks.of(order[j]);
        if (slow.count(order[j]) || u == own || site_of(sites, order[j]) != site) continue;
        if (load[u] < load[uplinks.of(order[best])]) best = j;
      }
      if (best == parent) continue;
      --load[uplinks.of(order[parent])];
      ++load[uplinks.of(order[best])];
      from[i] = best;
    }
  }
}

}  // namespace deltacast
