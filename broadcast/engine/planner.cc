#include "broadcast/engine/planner.h"

#include <algorithm>
#include <cmath>

#include "core/hash.h"

namespace deltacast {

uint32_t Plan::child(uint32_t id, uint32_t stripe) const {
  const auto& chain = chains[stripe];
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (chain[i] == id) return chain[i + 1];
  }
  return 0;
}

std::vector<uint32_t> Plan::children(uint32_t id) const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < stripes(); ++s) out.push_back(child(id, s));
  return out;
}

std::vector<uint32_t> Plan::heads() const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < stripes(); ++s) out.push_back(head(s));
  return out;
}

uint32_t default_stripes(size_t consumers) { return static_cast<uint32_t>(std::clamp<size_t>(consumers, 1, 4)); }

namespace {

// One node's members as they go in every chain: the fast ones (rotated per stripe), then its
// slow ones, slowest last.
struct NodeGroup {
  std::vector<uint32_t> fast;
  std::vector<uint32_t> slow;
  size_t slowest = 0;  // 1 + the position in the slow list of its slowest member (0: none)
};

}  // namespace

Plan plan_chains(std::vector<uint32_t> members, uint32_t stripes, const std::vector<uint32_t>& slow,
                 const NodeOf& nodes) {
  Plan plan;
  if (members.empty() || stripes == 0) return plan;
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  for (uint32_t id : slow) {
    if (std::binary_search(members.begin(), members.end(), id)) plan.slow.push_back(id);
  }
  // Groups in the order of their first member's id; a member with no node is a group alone.
  std::vector<NodeGroup> groups;
  std::map<std::string, size_t> group_of_node;
  for (uint32_t id : members) {
    const auto node = nodes.find(id);
    size_t g = groups.size();
    if (node != nodes.end()) {
      g = group_of_node.emplace(node->second, groups.size()).first->second;
    }
    if (g == groups.size()) groups.emplace_back();
    const auto at = std::find(plan.slow.begin(), plan.slow.end(), id);
    if (at == plan.slow.end()) {
      groups[g].fast.push_back(id);
    } else {
      const size_t rank = static_cast<size_t>(at - plan.slow.begin()) + 1;
      groups[g].slow.push_back(id);
      groups[g].slowest = std::max(groups[g].slowest, rank);
    }
  }
  const auto slow_rank = [&](uint32_t id) { return std::find(plan.slow.begin(), plan.slow.end(), id) - plan.slow.begin(); };
  for (auto& group : groups) {
    std::sort(group.slow.begin(), group.slow.end(), [&](uint32_t a, uint32_t b) { return slow_rank(a) < slow_rank(b); });
  }
  // Nodes without slow members rotate at the heads; the others follow, the slowest last.
  std::vector<const NodeGroup*> fast_groups, slow_groups;
  for (const auto& group : groups) (group.slowest == 0 ? fast_groups : slow_groups).push_back(&group);
  std::stable_sort(slow_groups.begin(), slow_groups.end(),
                   [](const NodeGroup* a, const NodeGroup* b) { return a->slowest < b->slowest; });
  plan.chains.resize(stripes);
  for (uint32_t s = 0; s < stripes; ++s) {
    auto& chain = plan.chains[s];
    const auto append = [&](const NodeGroup& group) {
      for (size_t i = 0; i < group.fast.size(); ++i) chain.push_back(group.fast[(i + s) % group.fast.size()]);
      chain.insert(chain.end(), group.slow.begin(), group.slow.end());
    };
    const size_t n = fast_groups.size();
    const size_t shift = n == 0 ? 0 : (s * n / stripes) % n;
    for (size_t i = 0; i < n; ++i) append(*fast_groups[(i + shift) % n]);
    for (const NodeGroup* group : slow_groups) append(*group);
  }
  return plan;
}

Plan without_members(const Plan& plan, const std::vector<uint32_t>& dropped) {
  const auto gone = [&](uint32_t id) { return std::find(dropped.begin(), dropped.end(), id) != dropped.end(); };
  Plan out = plan;
  for (auto& chain : out.chains) std::erase_if(chain, gone);
  std::erase_if(out.slow, gone);
  return out;
}

Plan to_tails(const Plan& plan, const std::vector<uint32_t>& moved) {
  Plan out = without_members(plan, moved);
  for (size_t s = 0; s < out.chains.size(); ++s) {
    for (uint32_t id : moved) {
      const auto& before = plan.chains[s];
      const bool was_there = std::find(before.begin(), before.end(), id) != before.end();
      const bool placed = std::find(out.chains[s].begin(), out.chains[s].end(), id) != out.chains[s].end();
      if (was_there && !placed) out.chains[s].push_back(id);
    }
  }
  return out;
}

uint32_t alpha_beta_slice_bytes(uint64_t bytes, uint32_t hops, double alpha_seconds, double beta_bytes_per_second,
                                uint32_t min_bytes, uint32_t max_bytes) {
  if (bytes == 0) return min_bytes;
  const double pieces = std::sqrt(std::max<double>(1, hops - 1) * static_cast<double>(bytes) /
                                  std::max(1e-12, alpha_seconds * beta_bytes_per_second));
  const double size = static_cast<double>(bytes) / std::max(1.0, pieces);
  // Down to whole hash leaves, so that slices start on leaves, and no coarser: rounded to a power
  // of two, the size jumped 2x where the rate crossed a threshold, and a few percent of measured
  // rate moved every hop of a version by 2x (8192 simulated consumers: a slow node elsewhere
  // lowered the healthy rate by a little, slices went from 4 to 2 MiB, and the median consumer
  // from 0.44 to 0.40 s).
  const uint64_t rounded = static_cast<uint64_t>(std::max(1.0, size)) / kHashLeafBytes * kHashLeafBytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(rounded, min_bytes, max_bytes));
}

double rate_without_slice_cost(double rate, double alpha_seconds, uint32_t slice_bytes) {
  if (rate <= 0 || slice_bytes == 0 || alpha_seconds <= 0) return rate;
  const double seconds_per_byte = 1 / rate - alpha_seconds / slice_bytes;
  return seconds_per_byte <= 0.25 / rate ? 4 * rate : 1 / seconds_per_byte;
}

VersionShape version_shape(uint64_t bytes, size_t members, uint32_t hops, double rate, uint32_t rails,
                           double alpha_seconds, uint32_t stripes, uint32_t slice_bytes,
                           uint32_t measured_slice_bytes) {
  VersionShape shape;
  shape.stripes = stripes != 0 ? stripes : default_stripes(members);
  const double rail_rate =
      rate_without_slice_cost(rate / std::max<uint32_t>(1, rails), alpha_seconds, measured_slice_bytes);
  shape.slice_bytes = slice_bytes != 0 ? slice_bytes
                                       : alpha_beta_slice_bytes(bytes / shape.stripes, std::max<uint32_t>(1, hops),
                                                                alpha_seconds, rail_rate);
  const uint64_t slices = bytes == 0 ? 0 : (bytes + shape.slice_bytes - 1) / shape.slice_bytes;
  shape.stripes = static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(shape.stripes, slices)));
  return shape;
}

}  // namespace deltacast
