// The broadcast plan: who forwards which slices to whom. A version's slices
// are dealt round-robin into stripes; each stripe travels down its own chain
// of consumers (the producer feeds the head, every consumer forwards to the
// next as soon as a slice arrives), so the tree is pipelined and the
// producer's uplink carries every byte once. Chains are rotations of one
// order, so every consumer is first in some stripe and no uplink carries
// everything. A consumer whose incoming link held up a chain (its parent had
// slices waiting for it) is slow: it sits at the tails of every chain, where
// it delays nobody, the slowest last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "broadcast/sprayer.h"

namespace deltacast {

struct PlanMember {
  uint32_t id = 0;
  // Receive rate (bytes/s) measured where the link into this member was the
  // bottleneck of its chain; 0 when it kept up (or was never measured).
  double rate = 0;
  // The member whose link to this one measured `rate` (0: none). A port that is slow both ways
  // makes the links into and out of its member bottlenecks: the child of a parent measured as
  // slow as itself is explained by that parent and stays in the chains.
  uint32_t rate_from = 0;
  // It sat at the tails in the last plan: it stays there until it keeps up, or
  // its rate comes within kRecoverFraction of the healthy rate (hysteresis, so
  // that a slow member does not bounce back into the chains whenever the others
  // kept up and left nothing to compare it with).
  bool slow = false;
};

struct Plan {
  // chains[s]: consumer ids in forwarding order for stripe s.
  std::vector<std::vector<uint32_t>> chains;

  uint32_t stripes() const { return static_cast<uint32_t>(chains.size()); }
  static uint32_t stripe_of(uint32_t slice, uint32_t stripes) { return slice % stripes; }
  // The consumer `id` forwards stripe s to (0: nobody).
  uint32_t child(uint32_t id, uint32_t stripe) const;
  // Members placed at the tails, slowest last.
  std::vector<uint32_t> slow;
  // The consumer the producer feeds for stripe s (0: none).
  uint32_t head(uint32_t stripe) const { return chains[stripe].empty() ? 0 : chains[stripe].front(); }
};

// A member measured as a bottleneck at under this fraction of the healthy rate (the median
// of the others' measured rates, or the one remembered from earlier rounds) is slow; a rate
// sample below this fraction of the last one counts at once (smoothed_rate). A slow member at a tail delays nobody, so a false alarm costs little, and
// one that was right saves every member downstream of it.
inline constexpr double kSlowFraction = 0.6;
// A slow member rejoins the chains after this many rounds in which it kept up (membership.cc)...
inline constexpr uint32_t kKeptUpRounds = 3;
// ... or once measured at this fraction of the healthy rate.
inline constexpr double kRecoverFraction = 0.8;

// The upper median of `rates` (0 when empty): one outlier on busy cores moves it little.
double upper_median(std::vector<double> rates);

// `reference`: the rate of a healthy member as measured in earlier rounds (0: none), to compare
// with when this round's measurements hold no healthy member (the others kept up, or sat
// downstream of the slow one and were starved by it).
Plan plan_chains(std::vector<PlanMember> members, uint32_t stripes, double reference = 0);

// The healthy rate to remember after a plan: the median rate measured at members left in the
// chains (moving down only gradually), or the old one when none was measured.
double next_reference_rate(double reference, const std::vector<PlanMember>& members, const Plan& plan);

// A member's rate after a new sample (0: none yet). A drop below kSlowFraction
// counts at once, so that a node that turned slow leaves the middle of the
// chains before it delays another version; other changes are smoothed.
double smoothed_rate(double old_rate, double sample);

// A link kept busy by offered slices at least this share of the time was the bottleneck of its
// chain: its delivery rate is its receiver's capacity. A link that kept up says nothing of it.
inline constexpr double kBottleneckShare = 0.5;
// The rate sample a link gives its receiver: the measured rate when it was the bottleneck, 0
// (not slow, as far as anyone knows) when it kept up, nullopt when nothing was measured.
std::optional<double> receiver_rate(const LinkSample& sample);

// Stripes for n consumers: enough that no uplink carries everything, few
// enough that each chain's slices stay large.
uint32_t default_stripes(size_t consumers);

// Slice size from the alpha-beta model of a pipelined chain of `hops` links:
// k* = sqrt((hops - 1) * bytes / (alpha * beta)) pieces minimise
// fill time plus per-piece overhead; the slice is bytes / k*, clamped.
uint32_t alpha_beta_slice_bytes(uint64_t bytes, uint32_t hops, double alpha_seconds, double beta_bytes_per_second,
                                uint32_t min_bytes = 64 << 10, uint32_t max_bytes = 4 << 20);

}  // namespace deltacast
