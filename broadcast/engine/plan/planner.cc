#include "broadcast/engine/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "broadcast/engine/plan/orphans.h"
#include "broadcast/engine/plan/uplinks.h"
#include "core/hash.h"

namespace deltacast {

std::vector<uint32_t> Plan::children_in(uint32_t id, uint32_t stripe) const {
  std::vector<uint32_t> out;
  const auto& members = order[stripe];
  const auto at = std::find(members.begin(), members.end(), id);
  if (at == members.end()) return out;
  const auto position = static_cast<uint32_t>(at - members.begin());
  // Children come after their parent.
  for (size_t i = position + 1; i < members.size(); ++i) {
    if (fed_by[stripe][i] == position) out.push_back(members[i]);
  }
  return out;
}

StripeChildren Plan::children(uint32_t id) const {
  StripeChildren out;
  for (uint32_t s = 0; s < stripes(); ++s) out.push_back(children_in(id, s));
  return out;
}

uint32_t Plan::parent(uint32_t id, uint32_t stripe) const {
  const auto& members = order[stripe];
  const auto at = std::find(members.begin(), members.end(), id);
  if (at == members.end()) return 0;
  const uint32_t from = fed_by[stripe][static_cast<size_t>(at - members.begin())];
  return from == kFromProducer ? 0 : members[from];
}

StripeChildren Plan::heads() const {
  StripeChildren out(stripes());
  for (uint32_t s = 0; s < stripes(); ++s) {
    for (size_t i = 0; i < order[s].size(); ++i) {
      if (fed_by[s][i] == kFromProducer) out[s].push_back(order[s][i]);
    }
  }
  return out;
}

uint32_t Plan::depth() const {
  uint32_t deepest = 0;
  for (const auto& from : fed_by) {
    std::vector<uint32_t> hops(from.size());
    for (size_t i = 0; i < from.size(); ++i) {
      hops[i] = from[i] == kFromProducer ? 1 : hops[from[i]] + 1;
      deepest = std::max(deepest, hops[i]);
    }
  }
  return deepest;
}

Result<uint32_t> parse_shape(std::string_view name) {
  if (name == "auto") return 0u;
  if (name == "chains") return 1u;
  for (uint32_t k : kFanouts) {
    if (k > 1 && name == fmt::format("trees:{}", k)) return k;
  }
  return invalid_argument("shape '{}': give auto, chains, trees:2, trees:4 or trees:8", name);
}

std::string shape_name(uint32_t fanout) {
  if (fanout == 0) return "auto";
  return fanout == 1 ? "chains" : fmt::format("trees:{}", fanout);
}

uint32_t default_stripes(size_t consumers) { return static_cast<uint32_t>(std::clamp<size_t>(consumers, 1, 4)); }

namespace {

// `id` joins a stripe fed by the member placed last (the next in a chain; the producer's where
// the stripe is empty).
void append_after_last(std::vector<uint32_t>& order, std::vector<uint32_t>& fed_by, uint32_t id) {
  fed_by.push_back(order.empty() ? Plan::kFromProducer : static_cast<uint32_t>(order.size() - 1));
  order.push_back(id);
}

// A slice of `size` bytes in whole hash leaves (so that slices start on leaves), clamped.
uint32_t whole_leaves(double size, uint32_t min_bytes, uint32_t max_bytes) {
  const uint64_t rounded = static_cast<uint64_t>(std::max(1.0, size)) / kHashLeafBytes * kHashLeafBytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(rounded, min_bytes, max_bytes));
}

// One node's members as they go in every chain: the fast ones (rotated per stripe), then its
// slow ones, slowest last.
struct NodeGroup {
  std::vector<uint32_t> fast;
  std::vector<uint32_t> slow;
  size_t slowest = 0;  // 1 + the position in the slow list of its slowest member (0: none)
};

// One site's nodes: those without slow members rotate at its heads, the others follow in a chain,
// the slowest last.
struct SiteGroups {
  std::vector<const NodeGroup*> fast;
  std::vector<const NodeGroup*> slow;
};

// Where a site's part of a stripe went in the stripe's order.
struct PlacedSite {
  std::vector<uint32_t> entries;  // its fast nodes' entries, by heap position
  uint32_t last_fast = Plan::kFromProducer;  // its last healthy member, its fast nodes' first (none: kFromProducer)
  bool empty = true;
};

// Places stripe s's part of one site: its fast nodes in a k-ary heap (node p takes the stripe from
// node (p - 1) / k, the root from `feeder`), each node's entry feeding the entries of its child
// nodes and the rest of its own node in a chain (in a chain, k = 1, a node's first member takes it
// from the previous node's last); then its nodes with slow members: their healthy members on in
// the chain, their slow members below the last healthy member (see below).
PlacedSite place_site(const SiteGroups& site, uint32_t s, uint32_t stripes, uint32_t fanout, uint32_t feeder,
                      std::vector<uint32_t>& order, std::vector<uint32_t>& fed_by) {
  PlacedSite placed;
  uint32_t last = feeder;  // the member placed last (the next one's parent in a chain)
  const auto place = [&](uint32_t id, uint32_t parent) {
    fed_by.push_back(parent);
    last = static_cast<uint32_t>(order.size());
    order.push_back(id);
    placed.empty = false;
  };
  const size_t n = site.fast.size();
  const size_t shift = n == 0 ? 0 : (s * n / stripes) % n;
  for (size_t p = 0; p < n; ++p) {
    const NodeGroup& group = *site.fast[(p + shift) % n];
    const uint32_t parent = fanout == 1 || p == 0 ? last : placed.entries[(p - 1) / fanout];
    placed.entries.push_back(static_cast<uint32_t>(order.size()));
    place(group.fast[s % group.fast.size()], parent);
    for (size_t i = 1; i < group.fast.size(); ++i) place(group.fast[(i + s) % group.fast.size()], last);
  }
  placed.last_fast = n == 0 ? Plan::kFromProducer : last;
  // The healthy members of nodes with slow members go on in the healthy chain; the slow nodes
  // hang below the last healthy member, up to max(2, fanout) of them, the rest in a heap below
  // those (slowest last, so deepest). Below another slow member a member takes that one's pace
  // and measures as slow as it: a healthy consumer put at the tails on one noisy round was held
  // there by a throttled one for rounds on end. (A site without healthy members chains them, so
  // that the stripe still enters it once.)
  const size_t tail_fanout = std::max<size_t>(2, fanout);
  // Every healthy member first, so that each is there to feed a slow member in trees
  // (hang_slow_members_from_idle_uplinks: one on a node with slow members forwards nothing).
  std::vector<uint32_t> node_last(site.slow.size(), Plan::kFromProducer);  // each slow node's last healthy member
  for (size_t g = 0; g < site.slow.size(); ++g) {
    const NodeGroup* group = site.slow[g];
    for (size_t i = 0; i < group->fast.size(); ++i) {
      place(group->fast[(i + s) % group->fast.size()], placed.last_fast == Plan::kFromProducer ? last : placed.last_fast);
      placed.last_fast = last;
      node_last[g] = last;
    }
  }
  std::vector<uint32_t> slow_entries;  // each slow node's entry, by heap position
  for (size_t g = 0; g < site.slow.size(); ++g) {
    const NodeGroup* group = site.slow[g];
    if (node_last[g] != Plan::kFromProducer) last = node_last[g];
    for (size_t i = 0; i < group->slow.size(); ++i) {
      // A node's slow members follow one another (one entry into the node), from its own healthy
      // member if it has one.
      uint32_t parent = last;
      if (i == 0 && group->fast.empty() && placed.last_fast != Plan::kFromProducer) {
        const size_t p = slow_entries.size();
        parent = p < tail_fanout ? placed.last_fast : slow_entries[(p - tail_fanout) / tail_fanout];
        slow_entries.push_back(static_cast<uint32_t>(order.size()));
      }
      place(group->slow[i], parent);
    }
  }
  return placed;
}

}  // namespace

Plan plan_trees(std::vector<uint32_t> members, uint32_t stripes, uint32_t fanout, const std::vector<uint32_t>& slow,
                const NodeOf& nodes, const SiteOf& sites) {
  Plan plan;
  plan.fanout = std::max<uint32_t>(1, fanout);
  if (members.empty() || stripes == 0) return plan;
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  for (uint32_t id : slow) {
    if (std::binary_search(members.begin(), members.end(), id)) plan.slow.push_back(id);
  }
  // Groups in the order of their first member's id; a member with no node is a group alone. A
  // node's site is its first member's.
  std::vector<NodeGroup> groups;
  std::vector<std::string> site_of_group;
  std::map<std::string, size_t> group_of_node;
  for (uint32_t id : members) {
    const auto node = nodes.find(id);
    size_t g = groups.size();
    if (node != nodes.end()) {
      g = group_of_node.emplace(node->second, groups.size()).first->second;
    }
    if (g == groups.size()) {
      groups.emplace_back();
      site_of_group.push_back(site_of(sites, id));
    }
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
  // Sites: the producer's first (its members have no site), then the others in the order of their
  // first member's id.
  std::vector<SiteGroups> site_groups(1);
  std::map<std::string, size_t> site_index = {{std::string(), 0}};
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t at = site_index.emplace(site_of_group[g], site_groups.size()).first->second;
    if (at == site_groups.size()) site_groups.emplace_back();
    (groups[g].slowest == 0 ? site_groups[at].fast : site_groups[at].slow).push_back(&groups[g]);
  }
  for (auto& site : site_groups) {
    std::stable_sort(site.slow.begin(), site.slow.end(),
                     [](const NodeGroup* a, const NodeGroup* b) { return a->slowest < b->slowest; });
  }
  plan.order.resize(stripes);
  plan.fed_by.resize(stripes);
  for (uint32_t s = 0; s < stripes; ++s) {
    // Each stripe enters each site once. The producer's site takes it from the producer; in
    // chains the others follow one after another (each from the previous site's last healthy
    // member), in trees each takes it from an entry of the producer's site, rotated over the
    // sites and stripes so that the WAN sends spread over its nodes.
    const PlacedSite home = place_site(site_groups[0], s, stripes, plan.fanout, Plan::kFromProducer, plan.order[s],
                                       plan.fed_by[s]);
    uint32_t previous = home.empty ? Plan::kFromProducer
                                   : (home.last_fast != Plan::kFromProducer ? home.last_fast
                                                                            : static_cast<uint32_t>(plan.order[s].size() - 1));
    for (size_t i = 1; i < site_groups.size(); ++i) {
      uint32_t feeder = previous;
      if (plan.fanout > 1) {
        feeder = home.entries.empty() ? Plan::kFromProducer : home.entries[(i - 1 + s) % home.entries.size()];
      }
      const PlacedSite placed = place_site(site_groups[i], s, stripes, plan.fanout, feeder, plan.order[s], plan.fed_by[s]);
      if (!placed.empty) {
        previous = placed.last_fast != Plan::kFromProducer ? placed.last_fast
                                                           : static_cast<uint32_t>(plan.order[s].size() - 1);
      }
    }
  }
  if (plan.fanout > 1) hang_slow_members_from_idle_uplinks(plan, nodes, sites);
  plan.built_depth = plan.depth();
  plan.built_busiest = busiest_uplink(plan, nodes);
  return plan;
}

Plan plan_chains(std::vector<uint32_t> members, uint32_t stripes, const std::vector<uint32_t>& slow,
                 const NodeOf& nodes, const SiteOf& sites) {
  return plan_trees(std::move(members), stripes, 1, slow, nodes, sites);
}

Plan plan_from_chains(std::vector<std::vector<uint32_t>> chains) {
  Plan plan;
  plan.order.resize(chains.size());
  plan.fed_by.resize(chains.size());
  for (size_t s = 0; s < chains.size(); ++s) {
    for (uint32_t id : chains[s]) append_after_last(plan.order[s], plan.fed_by[s], id);
  }
  return plan;
}

namespace {

// Stripe `order`/`from` without the positions `gone` says, appended to `out_order`/`out_from`:
// each child re-parented to its nearest ancestor that stays (parents come first, so theirs is
// known).
template <typename Gone>
void keep_in_stripe(const std::vector<uint32_t>& order, const std::vector<uint32_t>& from, Gone gone,
                    std::vector<uint32_t>& out_order, std::vector<uint32_t>& out_from) {
  std::vector<uint32_t> moved_to(order.size(), Plan::kFromProducer);
  for (size_t i = 0; i < order.size(); ++i) {
    if (gone(i)) continue;
    uint32_t parent = from[i];
    while (parent != Plan::kFromProducer && gone(parent)) parent = from[parent];
    moved_to[i] = static_cast<uint32_t>(out_order.size());
    out_order.push_back(order[i]);
    out_from.push_back(parent == Plan::kFromProducer ? Plan::kFromProducer : moved_to[parent]);
  }
}

// A plan of `plan`'s stripes and fan-out, with no members yet.
Plan empty_like(const Plan& plan) {
  Plan out;
  out.fanout = plan.fanout;
  out.built_depth = plan.built_depth;
  out.built_busiest = plan.built_busiest;
  out.order.resize(plan.stripes());
  out.fed_by.resize(plan.stripes());
  return out;
}

}  // namespace

std::string site_of(const SiteOf& sites, uint32_t id) {
  const auto it = sites.find(id);
  return it == sites.end() ? std::string() : it->second;
}

bool fed_across_sites(const Plan& plan, uint32_t id, const SiteOf& sites) {
  const std::string own = site_of(sites, id);
  if (own.empty()) return false;
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    if (std::find(order.begin(), order.end(), id) == order.end()) continue;
    const uint32_t parent = plan.parent(id, s);
    if (parent == 0 || site_of(sites, parent) != own) return true;
  }
  return false;
}

Plan without_members(const Plan& plan, const std::vector<uint32_t>& dropped, const NodeOf& nodes, const SiteOf& sites) {
  const std::set<uint32_t> dead(dropped.begin(), dropped.end());
  const auto gone = [&](uint32_t id) { return dead.count(id) != 0; };
  Plan out = empty_like(plan);
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    keep_in_stripe(order, plan.fed_by[s], [&](size_t i) { return gone(order[i]); }, out.order[s], out.fed_by[s]);
  }
  out.slow = plan.slow;
  std::erase_if(out.slow, gone);
  spread_orphans(plan, dropped, nodes, sites, out);
  return out;
}

Plan to_tails(const Plan& plan, const std::vector<uint32_t>& moved, const SiteOf& sites,
              std::vector<uint32_t>* everyone_moved, const BrokenLinks& broken) {
  // Every member of `moved` goes to the tails, once each, in that order (a member that hung
  // delays nobody there, and stays in case only its link failed).
  std::vector<uint32_t> tails;
  for (uint32_t id : moved) {
    if (std::find(tails.begin(), tails.end(), id) == tails.end()) tails.push_back(id);
  }
  const auto to_tail = [&](uint32_t id) { return std::find(tails.begin(), tails.end(), id) != tails.end(); };
  // A member its parent in another site cannot reach (or the producer, for a member away from the
  // producer's site): the link into its site may have failed. The rest of its site moves too, as
  // a block keeping its shape, below a third site.
  std::vector<std::string> moved_sites;
  for (uint32_t id : tails) {
    const std::string own = site_of(sites, id);
    if (fed_across_sites(plan, id, sites) && std::find(moved_sites.begin(), moved_sites.end(), own) == moved_sites.end()) {
      moved_sites.push_back(own);
    }
  }
  const auto in_block = [&](uint32_t id) {
    return !to_tail(id) &&
           std::find(moved_sites.begin(), moved_sites.end(), site_of(sites, id)) != moved_sites.end();
  };
  Plan out = empty_like(plan);
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    const auto& from = plan.fed_by[s];
    auto& out_order = out.order[s];
    auto& out_from = out.fed_by[s];
    keep_in_stripe(order, from, [&](size_t i) { return in_block(order[i]) || to_tail(order[i]); }, out_order, out_from);
    const size_t kept = out_order.size();
    // Below the last member kept outside `site`, outside the site that fed it and not across a
    // link known broken (failing that, not across a broken link; failing that, not from the
    // feeder site; failing that, anywhere outside `site`; failing that, the producer).
    const auto feeder_for = [&](const std::string& site, const std::string& feeder_site) {
      for (const auto& [avoid_feeder, avoid_broken] : {std::pair{true, true}, {false, true}, {true, false}, {false, false}}) {
        for (size_t k = kept; k-- > 0;) {
          const std::string other = site_of(sites, out_order[k]);
          if (other == site || (avoid_feeder && other == feeder_site)) continue;
          if (avoid_broken && broken.count({other, site})) continue;
          return static_cast<uint32_t>(k);
        }
      }
      return Plan::kFromProducer;
    };
    std::map<std::string, uint32_t> last_of_site;  // each moved site's member placed last
    std::vector<uint32_t> moved_to(order.size(), Plan::kFromProducer);
    for (const std::string& site : moved_sites) {
      uint32_t root = Plan::kFromProducer;  // where the block enters the site, once
      for (size_t i = 0; i < order.size(); ++i) {
        if (!in_block(order[i]) || site_of(sites, order[i]) != site) continue;
        uint32_t parent = from[i];
        while (parent != Plan::kFromProducer && to_tail(order[parent])) parent = from[parent];
        const bool inside = parent != Plan::kFromProducer && site_of(sites, order[parent]) == site;
        if (!inside && root != Plan::kFromProducer) {
          // Another member the moved entry fed: from the block's entry, inside the site (its
          // fan-out grows, as with deaths), so the stripe still crosses into the site once.
          out_from.push_back(root);
        } else if (!inside) {
          // The block's entry, from a third site.
          out_from.push_back(feeder_for(site, parent == Plan::kFromProducer ? std::string() : site_of(sites, order[parent])));
          root = static_cast<uint32_t>(out_order.size());
        } else {
          out_from.push_back(moved_to[parent]);
        }
        moved_to[i] = static_cast<uint32_t>(out_order.size());
        last_of_site[site] = static_cast<uint32_t>(out_order.size());
        out_order.push_back(order[i]);
      }
    }
    for (uint32_t id : tails) {
      const auto at = std::find(order.begin(), order.end(), id);
      if (at == order.end()) continue;
      const std::string site = site_of(sites, id);
      if (std::find(moved_sites.begin(), moved_sites.end(), site) == moved_sites.end()) {
        append_after_last(out_order, out_from, id);
        continue;
      }
      // A member of a moved site: below its site's member placed last; the first of its site
      // (its whole site reported at once) from a third site, as a block's entry.
      const auto last = last_of_site.find(site);
      if (last != last_of_site.end()) {
        out_from.push_back(last->second);
      } else {
        uint32_t parent = from[static_cast<size_t>(at - order.begin())];
        while (parent != Plan::kFromProducer && to_tail(order[parent]) && site_of(sites, order[parent]) == site) {
          parent = from[parent];
        }
        out_from.push_back(feeder_for(site, parent == Plan::kFromProducer ? std::string() : site_of(sites, order[parent])));
      }
      last_of_site[site] = static_cast<uint32_t>(out_order.size());
      out_order.push_back(id);
    }
  }
  out.slow = plan.slow;
  std::erase_if(out.slow, [&](uint32_t id) { return in_block(id) || to_tail(id); });
  if (everyone_moved != nullptr) {
    std::set<uint32_t> all;
    for (const auto& order : plan.order) {
      for (uint32_t id : order) {
        if (in_block(id) || to_tail(id)) all.insert(id);
      }
    }
    everyone_moved->assign(all.begin(), all.end());
  }
  return out;
}

Plan around_broken_links(const Plan& plan, const SiteOf& sites, const BrokenLinks& broken,
                         std::vector<uint32_t>* moved) {
  std::vector<uint32_t> across;
  // Every round starts here: nothing broken costs nothing, and parents come from fed_by by index
  // (Plan::parent searches the stripe, quadratic over thousands of members).
  for (uint32_t s = 0; s < plan.stripes() && !broken.empty(); ++s) {
    const auto& order = plan.order[s];
    for (size_t i = 0; i < order.size(); ++i) {
      const uint32_t from = plan.fed_by[s][i];
      const std::string feeder_site = from == Plan::kFromProducer ? std::string() : site_of(sites, order[from]);
      if (broken.count({feeder_site, site_of(sites, order[i])}) &&
          std::find(across.begin(), across.end(), order[i]) == across.end()) {
        across.push_back(order[i]);
      }
    }
  }
  if (across.empty()) {
    if (moved != nullptr) moved->clear();
    return plan;
  }
  // The entries fed across a broken link move; to_tails hangs each below its own site's block
  // (or, the whole site fed so, the first as the block's entry from a working site).
  return to_tails(plan, across, sites, moved, broken);
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
  return whole_leaves(size, min_bytes, max_bytes);
}

double rate_without_slice_cost(double rate, double alpha_seconds, uint32_t slice_bytes) {
  if (rate <= 0 || slice_bytes == 0 || alpha_seconds <= 0) return rate;
  const double seconds_per_byte = 1 / rate - alpha_seconds / slice_bytes;
  return seconds_per_byte <= 0.25 / rate ? 4 * rate : 1 / seconds_per_byte;
}

ShapeLoad shape_load(uint32_t nodes, uint32_t stripes, uint32_t fanout) {
  ShapeLoad load;
  if (nodes == 0 || stripes == 0) return load;
  fanout = std::max<uint32_t>(1, fanout);
  if (fanout == 1) {
    load.fill_hops = nodes - 1;
  }
  // The heap's depth (a chain's: nodes - 1): node p sits at depth d where (k^d - 1) / (k - 1) <= p.
  uint64_t first_of_level = 0, width = 1;
  while (fanout > 1 && first_of_level + width < nodes) {
    first_of_level += width;
    width *= fanout;
    ++load.fill_hops;
  }
  // Each node's children over the stripes, rotated as plan_trees rotates them.
  std::vector<uint32_t> sends(nodes, 0);
  for (uint32_t s = 0; s < stripes; ++s) {
    const uint64_t shift = (static_cast<uint64_t>(s) * nodes / stripes) % nodes;
    for (uint64_t p = 0; p * fanout + 1 < nodes; ++p) {
      const uint64_t children = std::min<uint64_t>(fanout, nodes - 1 - p * fanout);
      sends[(p + shift) % nodes] += static_cast<uint32_t>(children);
    }
  }
  load.sends_per_slice = *std::max_element(sends.begin(), sends.end());
  return load;
}

namespace {

// The terms of version_shape's model for one shape.
struct ShapeTerms {
  double moving = 0;   // L S / B: the busiest node's bytes out (the producer's at least) at the node's rate
  double per_slice = 0;  // alpha beta_rail: with moving, what the slices' own cost adds (moving * per_slice / m)
  double fill_alpha = 0;  // F g alpha
  double fill_per_byte = 0;  // F g / beta_rail: with m, what the fill's bytes add
};

ShapeTerms shape_terms(uint64_t bytes, uint32_t stripes, uint32_t fanout, const ShapeLoad& load, double rail_rate,
                       uint32_t rails, double alpha_seconds, const WanPath& wan) {
  ShapeTerms t;
  // The producer sends the whole version once, so no node's load counts below 1.
  const double load_factor =
      std::max(1.0, static_cast<double>(load.sends_per_slice) / std::max<uint32_t>(1, stripes));
  t.moving = load_factor * static_cast<double>(bytes) / (rail_rate * rails);
  t.per_slice = alpha_seconds * rail_rate;
  // A member's children of one stripe take each slice one after another: each child's sprayer
  // sends it over the rail it finds best, and they find the same rails best (simulated at 128
  // nodes, 2.8 GB: trees 4 wide went in 1.08x the time of trees 2 wide, where side by side over
  // the rails modelled them 0.95x).
  const double fan = fanout;
  t.fill_alpha = load.fill_hops * fan * alpha_seconds;
  t.fill_per_byte = load.fill_hops * fan / rail_rate;
  // Chains cross the sites in a row, trees enter each from the producer's site (plan_trees).
  const uint32_t wan_hops = wan.sites <= 1 ? 0 : fanout <= 1 ? wan.sites - 1 : 1;
  t.fill_alpha += wan_hops * std::max(0.0, wan.one_way_seconds);
  return t;
}

// T(m) = L S / B (1 + alpha beta_rail / m) + F g (alpha + m / beta_rail).
double modeled_seconds(const ShapeTerms& t, uint32_t slice_bytes) {
  const double m = std::max<uint32_t>(1, slice_bytes);
  return t.moving * (1 + t.per_slice / m) + t.fill_alpha + t.fill_per_byte * m;
}

// Its least over every slice size: (sqrt(L S / B) + sqrt(F g alpha))^2.
double modeled_bound(const ShapeTerms& t) {
  return t.moving + t.fill_alpha + 2 * std::sqrt(t.moving * t.per_slice * t.fill_per_byte);
}

// The slice at that least, in whole hash leaves, clamped as alpha_beta_slice_bytes clamps.
uint32_t modeled_slice_bytes(const ShapeTerms& t) {
  return whole_leaves(std::sqrt(t.moving * t.per_slice / std::max(1e-30, t.fill_per_byte)), 64 << 10, 4 << 20);
}

}  // namespace

VersionShape version_shape(uint64_t bytes, size_t members, uint32_t hops, double rate, uint32_t rails,
                           double alpha_seconds, uint32_t stripes, uint32_t slice_bytes,
                           uint32_t measured_slice_bytes, uint32_t fanout, WanPath wan) {
  const uint32_t nodes = std::max<uint32_t>(1, hops);
  rails = std::max<uint32_t>(1, rails);
  rate = std::max(rate, 1.0);
  const double rail_rate = rate_without_slice_cost(rate / rails, alpha_seconds, measured_slice_bytes);
  const auto shaped = [&](uint32_t k) {
    VersionShape shape;
    shape.fanout = k;
    shape.stripes = stripes != 0 ? stripes : k == 1 ? default_stripes(members) : k;
    const ShapeTerms terms =
        shape_terms(bytes, shape.stripes, k, shape_load(nodes, shape.stripes, k), rail_rate, rails, alpha_seconds, wan);
    if (slice_bytes != 0) {
      shape.slice_bytes = slice_bytes;
    } else if (k == 1 || nodes <= 1) {  // one node: the tree is a chain through it
      shape.slice_bytes = alpha_beta_slice_bytes(bytes / shape.stripes, nodes, alpha_seconds, rail_rate);
    } else {
      shape.slice_bytes = modeled_slice_bytes(terms);
    }
    const uint64_t slices = bytes == 0 ? 0 : (bytes + shape.slice_bytes - 1) / shape.slice_bytes;
    shape.stripes = static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(shape.stripes, slices)));
    const ShapeTerms used =
        shape_terms(bytes, shape.stripes, k, shape_load(nodes, shape.stripes, k), rail_rate, rails, alpha_seconds, wan);
    shape.seconds = bytes == 0 ? 0 : modeled_seconds(used, shape.slice_bytes);
    shape.bound_seconds = bytes == 0 ? 0 : modeled_bound(used);
    return shape;
  };
  // Every shape the planner builds here (trees need nodes to fan out to; chains are always there).
  std::vector<VersionShape> buildable;
  for (uint32_t k : kFanouts) {
    if (k == 1 || k < nodes) buildable.push_back(shaped(k));
  }
  double bound = buildable.front().bound_seconds, fastest = buildable.front().seconds;
  for (const auto& c : buildable) {
    bound = std::min(bound, c.bound_seconds);
    fastest = std::min(fastest, c.seconds);
  }
  VersionShape chosen = fanout == 0 ? buildable.front() : shaped(fanout);
  if (fanout == 0) {
    for (const auto& c : buildable) {
      if (c.seconds <= 1.02 * fastest) {
        chosen = c;
        break;
      }
    }
  }
  chosen.bound_seconds = std::min(bound, chosen.bound_seconds);
  return chosen;
}

}  // namespace deltacast
