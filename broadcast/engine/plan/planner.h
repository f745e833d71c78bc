// The broadcast plan: who forwards which slices to whom. A version's slices are dealt
// round-robin into stripes; each stripe travels down its own tree of consumers (the producer
// feeds its head, every consumer forwards to its children as soon as a slice arrives), so the
// tree is pipelined and the producer's uplink carries every byte once. A fan-out of 1 makes each
// tree a chain (what large versions want: every member sends what it takes, once); a larger
// fan-out makes trees k wide and log_k deep (what small versions want: few hops of latency).
// The trees are rotations of one order, so every member is near the head of some stripe and no
// uplink carries everything. Slow members (the rate book says which, rate_book.h) hang in a chain
// below every tree's last member, where they delay nobody, the slowest last (in trees, from the
// healthy member whose uplink feeds the fewest: uplinks.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "broadcast/engine/plan/stripe_children.h"
#include "core/status.h"

namespace deltacast {

struct Plan {
  // Where a member takes a stripe from the producer (its head), in `fed_by`.
  static constexpr uint32_t kFromProducer = UINT32_MAX;

  // order[s]: stripe s's members, each after the member it takes the stripe from.
  std::vector<std::vector<uint32_t>> order;
  // fed_by[s][i]: the position in order[s] of the member order[s][i] takes stripe s from
  // (kFromProducer for the head): always before i.
  std::vector<std::vector<uint32_t>> fed_by;
  // Members placed at the tails, slowest last.
  std::vector<uint32_t> slow;
  // The widest a member fans a stripe out to, as built (1: chains).
  uint32_t fanout = 1;
  // As built, kept through re-plans: the deepest stripe, and the most children on other nodes a
  // node's uplink fed (0: not known). Deaths' re-plans hold to them (spread_orphans), so that one
  // death after another neither deepens the trees without bound nor raises the busiest uplink.
  uint32_t built_depth = 0;
  uint32_t built_busiest = 0;

  uint32_t stripes() const { return static_cast<uint32_t>(order.size()); }
  static uint32_t stripe_of(uint32_t slice, uint32_t stripes) { return slice % stripes; }
  // Whom `id` forwards stripe s to (none: the stripe ends there, or `id` is not in it).
  std::vector<uint32_t> children_in(uint32_t id, uint32_t stripe) const;
  // Whom `id` forwards each stripe to, one entry per stripe.
  StripeChildren children(uint32_t id) const;
  // The member `id` takes stripe s from (0: the producer, or `id` is not in it).
  uint32_t parent(uint32_t id, uint32_t stripe) const;
  // The consumer the producer feeds for stripe s (0: none).
  uint32_t head(uint32_t stripe) const { return order[stripe].empty() ? 0 : order[stripe].front(); }
  // The consumer fed first in each stripe (the producer's children).
  StripeChildren heads() const;
  // The most hops from the producer to any member, over the stripes.
  uint32_t depth() const;
};

// Which node (host) each member runs on; members missing from it are each a node of their own.
using NodeOf = std::map<uint32_t, std::string>;
// Which site (datacenter, region) each member runs in; members missing from it share the
// producer's site. Sites are joined by WAN links, the scarce resource between them.
using SiteOf = std::map<uint32_t, std::string>;

// Trees over `members` (any order; the plan orders them by id) for `stripes` stripes, each
// member fanning a stripe out to at most `fanout` other nodes (1: chains), with the members of
// `slow` (slowest last) in a chain below every tree (in trees hung from uplinks with room:
// hang_slow_members_from_idle_uplinks). Members of one node (`nodes`) take each
// stripe once over the network: the node's first member in that stripe (its entry) takes it from
// another node's entry, the rest of the node in a chain behind it over the node's own loopback.
// Nodes rotate over the stripes (the head, and with a fan-out the members that forward, differ
// from stripe to stripe: with `stripes` = `fanout` each node forwards in about one stripe) and so
// do the members within a node (each is the entry of some stripes); a slow member goes last in
// its node, and nodes holding slow members go last.
//
// With `sites`, each stripe enters each site once, so each version crosses each WAN link into a
// site once: the producer's site first, each other site's nodes in trees (or a chain) of their
// own below its entry node, and a site's slow nodes in a chain below its own members. In chains
// the sites follow one another; in trees each site takes the stripe from an entry of the
// producer's site (one WAN hop from the producer's site to every site), the entries rotating over
// sites and stripes. A site whose link fails goes on from another site: its members, unreachable
// from their parents, move to the tails (to_tails), below the last site's last member.
Plan plan_trees(std::vector<uint32_t> members, uint32_t stripes, uint32_t fanout, const std::vector<uint32_t>& slow = {},
                const NodeOf& nodes = {}, const SiteOf& sites = {});
// Chains: plan_trees with a fan-out of 1.
Plan plan_chains(std::vector<uint32_t> members, uint32_t stripes, const std::vector<uint32_t>& slow = {},
                 const NodeOf& nodes = {}, const SiteOf& sites = {});

// Chains in the order given, one per stripe (each member fed by the one before it).
Plan plan_from_chains(std::vector<std::vector<uint32_t>> chains);

// `plan` with the members of `dropped` taken out of every stripe and everyone else kept in place:
// each dropped member's children now take the stripe from its parent (its nearest ancestor that
// is still there). This is how a version under way goes on around members that died: the
// pipelines keep their positions, and in chains nobody's load changes. (A fresh plan over the
// rest rotates the stripes anew and hands most members a parent at another point of the
// version: the producer then re-sends much of it to new heads.) In trees, where the ancestor
// would feed more children on other nodes than before, the orphans beyond its freed place move to
// nodes whose uplinks the deaths freed (spread_orphans, orphans.h; `nodes` and `sites` as for
// plan_trees): no uplink carries more than before, and no stripe grows more than twice as deep.
Plan without_members(const Plan& plan, const std::vector<uint32_t>& dropped, const NodeOf& nodes = {},
                     const SiteOf& sites = {});

// WAN links found failed, from one site into another (sites by name; "": the producer's).
using BrokenLinks = std::set<std::pair<std::string, std::string>>;

// The site `id` names in `sites` (empty: the producer's).
std::string site_of(const SiteOf& sites, uint32_t id);
// Whether some stripe of `plan` feeds `id` from another site (or from the producer, `id` being
// away from the producer's site): a report of it unreachable may be about the link into its site.
bool fed_across_sites(const Plan& plan, uint32_t id, const SiteOf& sites);

// `plan` with the members of `moved` taken out of every stripe (their children re-parented as
// above) and hung in a chain below its last member (in that order): a member its parent cannot
// reach goes where it delays nobody, and stays in the plan in case only that link failed.
// With `sites`, a moved member whose parent was in another site (or the producer, away from the
// producer's site) takes the rest of its site along: the link into the site may have failed, and
// inside it they reach one another. The rest moves as a block, keeping its shape, hung below the
// last member outside both its site and the site that fed it: a site whose link failed takes the
// version from a third site (and the moved member itself, at the tails, from its own site's
// block; were it hung rather than cut off, the block goes on without it). `everyone_moved` (if
// given): the members moved, `moved` and their blocks, sorted.
// `broken`: WAN links found failed; no block is hung below a member across one of them while
// another member will do.
Plan to_tails(const Plan& plan, const std::vector<uint32_t>& moved, const SiteOf& sites = {},
              std::vector<uint32_t>* everyone_moved = nullptr, const BrokenLinks& broken = {});
// `plan` with every member fed over a link of `broken` moved as to_tails moves a reported one
// (its site along, below a site whose link into it works): a fresh plan for the next version
// routes around a WAN link that failed in the last. `moved` (if given): the members moved.
Plan around_broken_links(const Plan& plan, const SiteOf& sites, const BrokenLinks& broken,
                         std::vector<uint32_t>* moved = nullptr);

// Stripes for n consumers: enough that no uplink carries everything, few
// enough that each chain's slices stay large.
uint32_t default_stripes(size_t consumers);

// How a version goes out: its stripes, its fan-out and its slices' size, with what the
// alpha-beta model (below) expects of it.
struct VersionShape {
  uint32_t stripes = 1;
  uint32_t slice_bytes = 0;
  uint32_t fanout = 1;        // 1: chains; k: trees k wide
  double seconds = 0;         // the model's time for this shape
  double bound_seconds = 0;   // the model's best over every shape the planner builds (unclamped slices)
};

// A shape by name, as users give it: "auto" (0: the model's choice per version), "chains" (1),
// "trees:K" (trees K wide, K one of kFanouts above 1).
Result<uint32_t> parse_shape(std::string_view name);
// The name parse_shape reads back.
std::string shape_name(uint32_t fanout);

// The fan-outs the planner chooses among: chains and trees 2, 4 and 8 wide. Wider trees save
// few hops more and cost each forwarding member a connection per child.
inline constexpr uint32_t kFanouts[] = {1, 2, 4, 8};

// The WAN between sites as the shape model sees it: the sites with members (the producer's
// counted) and a WAN hop's one-way latency. In chains each stripe crosses the sites one after
// another (sites - 1 WAN hops in its fill), in trees every site takes it from the producer's
// (one): across 20-80 ms links the model without them chose chains for 64 simulated consumers in
// 4 sites, 1.32 s against trees' 0.79 s.
struct WanPath {
  uint32_t sites = 1;
  double one_way_seconds = 0;
};

// For `bytes` to `members` consumers on `hops` nodes, each taking and sending data at `rate`
// bytes/s over `rails` rails, `alpha_seconds` per slice per hop (latency and the slice's own
// cost). `fanout` 0 chooses the shape the model finds fastest (the narrowest within 2% of the
// fastest: chains are the sturdiest); otherwise that fan-out. `stripes` 0: default_stripes for
// chains, the fan-out for trees (each node then forwards in about one stripe, so no uplink
// carries more than the version); `slice_bytes` 0: the model's best for the shape, at most one
// stripe per slice. Chains' slices: the alpha-beta optimum for a chain through every node, with
// one rail's share of the rate as beta (a slice crosses each hop over one rail; taking the whole
// rate made slices `rails` times too large for the pipeline's fill). `measured_slice_bytes`: the
// slices `rate` was measured over (rate_without_slice_cost; 0: none). `wan`: the sites' WAN
// hops, each adding its latency to the fill.
//
// The model (docs/DESIGN.md, "Shapes"): slices of m bytes cross F fill hops (chains: nodes - 1;
// trees: the depth of a k-ary heap of the nodes), and
//   T(m) = L S / B (1 + alpha beta / m) + F k (alpha + m / beta) + W lambda
// with W the WAN hops a stripe crosses in a row and lambda a WAN hop's latency, L the busiest node's bytes out over the version's (shape_load's sends per slice over the
// stripes; the producer's 1 at least), B a node's rate, beta one rail's (a slice crosses a hop
// over one rail, and a member's k children of a stripe take it one after another). Its least
// over m is (sqrt(L S / B) + sqrt(F k alpha))^2; the bound is the least of those over the shapes.
VersionShape version_shape(uint64_t bytes, size_t members, uint32_t hops, double rate, uint32_t rails,
                           double alpha_seconds, uint32_t stripes = 0, uint32_t slice_bytes = 0,
                           uint32_t measured_slice_bytes = 0, uint32_t fanout = 1, WanPath wan = {});

// The fill hops and the sends per slice (F and c above) of `fanout`-wide trees (1: chains) in
// `stripes` stripes over `nodes` nodes, as plan_trees builds them.
struct ShapeLoad {
  uint32_t fill_hops = 0;
  uint32_t sends_per_slice = 0;
};
ShapeLoad shape_load(uint32_t nodes, uint32_t stripes, uint32_t fanout);

// A link's rate measured over slices of `slice_bytes` counts what each slice cost besides its
// bytes (slice/beta + alpha each), and the alpha-beta model counts that cost itself: it takes
// beta = 1 / (1/rate - alpha/slice), at most 4x the rate measured (a measurement that the cost
// would explain nearly all of says little of beta). Without it, slices sized from a measured
// rate came out smaller than the model's optimum, and measured lower still the next time (8192
// simulated consumers at 10 us per slice: measured at 0.54x the rails' rate after a first version
// of 1 MB slices, and a 140 GB version in 2.9 MiB slices instead of 3.75). 0 slice_bytes: the rate.
double rate_without_slice_cost(double rate, double alpha_seconds, uint32_t slice_bytes);

// Slice size from the alpha-beta model of a pipelined chain of `hops` links:
// k* = sqrt((hops - 1) * bytes / (alpha * beta)) pieces minimise
// fill time plus per-piece overhead; the slice is bytes / k*, in whole 64 KiB hash leaves, clamped.
uint32_t alpha_beta_slice_bytes(uint64_t bytes, uint32_t hops, double alpha_seconds, double beta_bytes_per_second,
                                uint32_t min_bytes = 64 << 10, uint32_t max_bytes = 4 << 20);

}  // namespace deltacast
