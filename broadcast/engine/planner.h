// The broadcast plan: who forwards which slices to whom. A version's slices
// are dealt round-robin into stripes; each stripe travels down its own chain
// of consumers (the producer feeds the head, every consumer forwards to the
// next as soon as a slice arrives), so the tree is pipelined and the
// producer's uplink carries every byte once. Chains are rotations of one
// order, so every consumer is first in some stripe and no uplink carries
// everything. Slow members (the rate book says which, rate_book.h) sit at the
// tails of every chain, where they delay nobody, the slowest last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deltacast {

struct Plan {
  // chains[s]: consumer ids in forwarding order for stripe s.
  std::vector<std::vector<uint32_t>> chains;
  // Members placed at the tails, slowest last.
  std::vector<uint32_t> slow;

  uint32_t stripes() const { return static_cast<uint32_t>(chains.size()); }
  static uint32_t stripe_of(uint32_t slice, uint32_t stripes) { return slice % stripes; }
  // The consumer `id` forwards stripe s to (0: nobody).
  uint32_t child(uint32_t id, uint32_t stripe) const;
  // Who `id` forwards each stripe to (0: nobody), one entry per stripe.
  std::vector<uint32_t> children(uint32_t id) const;
  // The consumer the producer feeds for stripe s (0: none).
  uint32_t head(uint32_t stripe) const { return chains[stripe].empty() ? 0 : chains[stripe].front(); }
  // The consumer fed first in each stripe.
  std::vector<uint32_t> heads() const;
};

// Which node (host) each member runs on; members missing from it are each a node of their own.
using NodeOf = std::map<uint32_t, std::string>;

// Chains over `members` (any order; the plan orders them by id) for `stripes` stripes, with the
// members of `slow` (slowest last) at every tail. Members of one node (`nodes`) are consecutive
// in every chain, so each stripe enters each node once and a node's rails carry every version
// once whatever the number of its members; the rest of the node takes the stripe from the
// member it entered at, over the node's own loopback. Nodes rotate over the stripes (every node
// is first in some stripe) and so do the members within a node (each is the entry of some
// stripes); a slow member goes last in its node, and nodes holding slow members go last.
Plan plan_chains(std::vector<uint32_t> members, uint32_t stripes, const std::vector<uint32_t>& slow = {},
                 const NodeOf& nodes = {});

// `plan` with the members of `dropped` taken out of every chain and everyone else kept in place:
// each dropped member's parent now feeds its child. This is how a version under way goes on
// around members that died: each surviving member's new parent was ahead of it in the same
// chain, so it holds what the old one held and more, and the pipelines keep their positions. (A
// fresh plan_chains over the rest rotates the chains anew and hands most members a parent at
// another point of the version: the producer then re-sends much of it to new heads.)
Plan without_members(const Plan& plan, const std::vector<uint32_t>& dropped);

// `plan` with the members of `moved` taken to the end of every chain (in that order), everyone
// else kept in place: a member its parent cannot reach goes where it delays nobody, fed by the
// last member of each chain, and stays in the plan in case only that link failed.
Plan to_tails(const Plan& plan, const std::vector<uint32_t>& moved);

// Stripes for n consumers: enough that no uplink carries everything, few
// enough that each chain's slices stay large.
uint32_t default_stripes(size_t consumers);

// How a version goes out: its stripes, and its slices' size.
struct VersionShape {
  uint32_t stripes = 1;
  uint32_t slice_bytes = 0;
};

// For `bytes` to `members` consumers taking data at `rate` bytes/s each over `rails` rails: the
// given `stripes` (0: default_stripes) and slices (0: the alpha-beta model below, for a chain
// through every member with `alpha_seconds` per slice), at most one stripe per slice. A slice
// crosses each hop over one rail, so the model's beta is one rail's share of the rate, not the
// whole of it (taking the whole made slices `rails` times too large for the pipeline's fill).
// `hops`: the network hops of a chain through every member, the members' distinct nodes (members
// of one node pass a version on among themselves, at the node's own rate).
// `measured_slice_bytes`: the slices `rate` was measured over (rate_without_slice_cost; 0: none).
VersionShape version_shape(uint64_t bytes, size_t members, uint32_t hops, double rate, uint32_t rails,
                           double alpha_seconds, uint32_t stripes = 0, uint32_t slice_bytes = 0,
                           uint32_t measured_slice_bytes = 0);

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
