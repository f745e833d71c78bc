#include "broadcast/engine/plan/orphans.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "broadcast/engine/plan/uplinks.h"

namespace deltacast {
namespace {

// One stripe's tree by position, while orphans move (a parent may then come after its child).
// Built only for a stripe with an overloaded orphan; every query is within a subtree or a path.
struct StripeTree {
  std::vector<uint32_t> parent;  // the parent's position, Plan::kFromProducer for a head
  std::vector<uint32_t> depth;   // hops from the producer
  std::vector<std::vector<uint32_t>> children;

  explicit StripeTree(const std::vector<uint32_t>& fed_by) : parent(fed_by), depth(fed_by.size()), children(fed_by.size()) {
    // Parents come first in a plan's stripe.
    for (uint32_t i = 0; i < parent.size(); ++i) {
      if (parent[i] == Plan::kFromProducer) {
        depth[i] = 1;
      } else {
        depth[i] = depth[parent[i]] + 1;
        children[parent[i]].push_back(i);
      }
    }
  }
  // Whether j is i or below it.
  bool below(uint32_t j, uint32_t i) const {
    for (uint32_t p = j; p != Plan::kFromProducer; p = parent[p]) {
      if (p == i) return true;
    }
    return false;
  }
  // Calls visit on i and everyone below it.
  template <typename Visit>
  void each_below(uint32_t i, Visit visit) const {
    std::vector<uint32_t> stack{i};
    while (!stack.empty()) {
      const uint32_t j = stack.back();
      stack.pop_back();
      visit(j);
      stack.insert(stack.end(), children[j].begin(), children[j].end());
    }
  }
  // Hops from i down to the deepest member below it.
  uint32_t height(uint32_t i) const {
    uint32_t deepest = depth[i];
    each_below(i, [&](uint32_t j) { deepest = std::max(deepest, depth[j]); });
    return deepest - depth[i];
  }
  // i, with everyone below it, now takes the stripe from `to` (kFromProducer: the producer).
  void move(uint32_t i, uint32_t to) {
    if (parent[i] != Plan::kFromProducer) std::erase(children[parent[i]], i);
    parent[i] = to;
    if (to != Plan::kFromProducer) children[to].push_back(i);
    const uint32_t from_depth = depth[i];
    const uint32_t to_depth = to == Plan::kFromProducer ? 1 : depth[to] + 1;
    each_below(i, [&](uint32_t j) { depth[j] = depth[j] - from_depth + to_depth; });
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

// Where x may go in place of a shorter subtree: a member w below `scope` (everyone when it is
// the producer), not below x, that `may_host` allows, with a child c that `displaceable` allows,
// shorter than x. Prefers a c that rose (above its depth as built, `allowed`: it can sink back
// without delay), then the shortest c, then the shallowest w. {kFromProducer, kFromProducer}: none.
template <typename MayHost, typename Displaceable>
std::pair<uint32_t, uint32_t> host_below(const StripeTree& tree, uint32_t scope, uint32_t x, MayHost may_host,
                                         Displaceable displaceable, const std::vector<uint32_t>& allowed) {
  std::vector<uint32_t> members;
  if (scope == Plan::kFromProducer) {
    for (uint32_t j = 0; j < tree.parent.size(); ++j) {
      if (tree.parent[j] == Plan::kFromProducer) tree.each_below(j, [&](uint32_t k) { members.push_back(k); });
    }
  } else {
    tree.each_below(scope, [&](uint32_t k) { members.push_back(k); });
  }
  // Heights of the members, deepest first (each_below lists parents before children).
  std::vector<uint32_t> height(tree.parent.size(), 0);
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    for (uint32_t c : tree.children[*it]) height[*it] = std::max(height[*it], height[c] + 1);
  }
  if (std::find(members.begin(), members.end(), x) == members.end()) return {Plan::kFromProducer, Plan::kFromProducer};
  std::vector<bool> below_x(tree.parent.size(), false);
  tree.each_below(x, [&](uint32_t k) { below_x[k] = true; });
  std::pair<uint32_t, uint32_t> best{Plan::kFromProducer, Plan::kFromProducer};
  std::tuple<bool, uint32_t, uint32_t> best_key{};
  for (uint32_t w : members) {
    if (below_x[w] || !may_host(w)) continue;
    for (uint32_t c : tree.children[w]) {
      if (c == x || height[c] >= height[x] || !displaceable(w, c)) continue;
      const std::tuple<bool, uint32_t, uint32_t> key{tree.depth[c] >= allowed[c], height[c], tree.depth[w]};
      if (best.first == Plan::kFromProducer || key < best_key) best = {w, c}, best_key = key;
    }
  }
  return best;
}

}  // namespace

void spread_orphans(const Plan& before, const std::vector<uint32_t>& dropped, const NodeOf& nodes, const SiteOf& sites,
                    Plan& after) {
  if (dropped.empty() || after.stripes() != before.stripes()) return;
  const std::set<uint32_t> gone(dropped.begin(), dropped.end());
  const std::set<uint32_t> slow(after.slow.begin(), after.slow.end());
  // What an uplink may feed: what the busiest node's fed before (the rate every stripe ran at;
  // a node that fed fewer, a leaf, has room), and the producer what it fed before.
  const Uplinks uplink_ids(before, nodes);  // `after`'s members are among `before`'s
  const auto loads_before = uplink_loads(before, uplink_ids);
  const int busiest = static_cast<int>(before.built_busiest > 0 ? before.built_busiest : busiest_of(loads_before));
  std::vector<int> load = uplink_loads(after, uplink_ids);
  const auto room_of = [&](int uplink) {
    return (uplink == Uplinks::kProducer ? loads_before[uplink] : busiest) - load[uplink];
  };
  const uint32_t depth_limit = 2 * (before.built_depth > 0 ? before.built_depth : before.depth());
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    const auto& order = after.order[s];
    const auto& from = after.fed_by[s];
    // The orphans: members whose parent in `before` died. Only those whose new parent's uplink is
    // overloaded may move (a move never overloads another), and in chains none is: their
    // subtrees (the rest of a chain) are never walked.
    std::unordered_map<uint32_t, uint32_t> old_parent;  // member -> its parent's id (0: the producer)
    const auto& old_order = before.order[s];
    for (size_t i = 0; i < old_order.size(); ++i) {
      const uint32_t f = before.fed_by[s][i];
      old_parent[old_order[i]] = f == Plan::kFromProducer ? 0 : old_order[f];
    }
    std::vector<uint32_t> overloaded;
    for (uint32_t i = 0; i < order.size(); ++i) {
      const auto it = old_parent.find(order[i]);
      if (it == old_parent.end() || it->second == 0 || !gone.count(it->second)) continue;
      // One on its dead parent's own node stays: it takes the dead member's place, and the node's
      // uplink, freed of the dead member's children, is where they go.
      const int own = uplink_ids.of(order[i]);
      if (uplink_ids.of(it->second) == own) continue;
      const int feeding = from[i] == Plan::kFromProducer ? Uplinks::kProducer : uplink_ids.of(order[from[i]]);
      if (feeding != own && room_of(feeding) < 0) overloaded.push_back(i);
    }
    if (overloaded.empty()) continue;
    StripeTree tree(from);
    std::vector<std::pair<uint32_t, uint32_t>> orphans;  // (height, position): the shortest first
    for (uint32_t i : overloaded) orphans.emplace_back(tree.height(i), i);
    std::sort(orphans.begin(), orphans.end());
    std::vector<int> uplinks;
    std::vector<std::string> member_sites;
    std::vector<bool> under_slow(order.size(), false);  // slow, or below a slow member
    for (uint32_t i = 0; i < order.size(); ++i) {
      uplinks.push_back(uplink_ids.of(order[i]));
      member_sites.push_back(site_of(sites, order[i]));
      under_slow[i] = slow.count(order[i]) != 0 || (from[i] != Plan::kFromProducer && under_slow[from[i]]);
    }
    // Each member's depth before this re-plan: how deep it may sink again without making anyone later.
    std::vector<uint32_t> allowed(tree.depth);
    {
      const StripeTree was(before.fed_by[s]);
      std::unordered_map<uint32_t, uint32_t> depth_was;
      for (uint32_t i = 0; i < before.order[s].size(); ++i) depth_was[before.order[s][i]] = was.depth[i];
      for (uint32_t i = 0; i < order.size(); ++i) {
        const auto it = depth_was.find(order[i]);
        if (it != depth_was.end()) allowed[i] = std::max(allowed[i], it->second);
      }
    }
    // The member of `site` with room on its uplink nearest the producer where x, with everyone
    // below it, stays within `limit` hops.
    const auto shallowest_room = [&](uint32_t x, const std::string& site, uint32_t limit) {
      const uint32_t height = tree.height(x);
      uint32_t best = Plan::kFromProducer;
      for (uint32_t j = 0; j < order.size(); ++j) {
        if (uplinks[j] == uplinks[x] || under_slow[j] || member_sites[j] != site || room_of(uplinks[j]) <= 0) continue;
        const uint32_t d = tree.depth[j];
        if (d + 1 + height > limit || (best != Plan::kFromProducer && d >= tree.depth[best]) || tree.below(j, x)) continue;
        best = j;
      }
      return best;
    };
    bool moved = false;
    for (const auto& [shortest_first, i] : orphans) {
      const uint32_t p = tree.parent[i];
      const int feeding = p == Plan::kFromProducer ? Uplinks::kProducer : uplinks[p];
      if (room_of(feeding) >= 0) continue;
      // From the same site as its parent now: the stripe crosses into the orphan's site as often as before.
      const std::string site = p == Plan::kFromProducer ? std::string() : member_sites[p];
      --load[feeding];
      moved = true;
      // The freed uplinks are at the bottom of the trees, so an orphan hung there with its
      // subtree sinks by the tree's depth (a dead node's child at depth 6 of 10 made 31 nodes
      // 5 hops, 0.6 ms, late at 8,192 simulated consumers). Instead it is passed down: it goes
      // no deeper than it was before this re-plan, below a member whose uplink is full, one of
      // whose children on other nodes, a shorter subtree, moves on the same way, and so on until
      // one finds a freed uplink no deeper than it was; the last may sink with its subtree
      // (usually a leaf, a hop or so). The dead member's other children, risen a hop with their
      // subtrees, are the hosts that let everyone land where they were. A pass that ends with
      // nowhere to go is undone: the orphan stays, overloading its parent as spliced.
      std::vector<std::pair<uint32_t, uint32_t>> pass;  // (moved, its parent before), in order
      for (uint32_t x = i;;) {
        const uint32_t room = shallowest_room(x, site, depth_limit);
        if (room != Plan::kFromProducer && tree.depth[room] + 1 <= allowed[x]) {
          tree.move(x, room);
          ++load[uplinks[room]];
          break;
        }
        const auto [host, next] = host_below(tree, p, x, [&](uint32_t w) {
          return !under_slow[w] && member_sites[w] == site && uplinks[w] != uplinks[x] && tree.depth[w] + 1 <= allowed[x];
        }, [&](uint32_t w, uint32_t c) { return uplinks[c] != uplinks[w] && !under_slow[c]; }, allowed);
        if (host == Plan::kFromProducer) {
          if (room != Plan::kFromProducer) {
            tree.move(x, room);
            ++load[uplinks[room]];
          } else {
            for (auto undo = pass.rbegin(); undo != pass.rend(); ++undo) tree.move(undo->first, undo->second);
            ++load[feeding];
          }
          break;
        }
        pass.emplace_back(x, tree.parent[x]);
        tree.move(x, host);  // the host's uplink feeds x instead of `next`
        x = next;
      }
    }
    if (moved) relist(after, s, tree);
  }
}

}  // namespace deltacast
