// deltacast-bench simulate's engine: one version broadcast to a simulated
// cluster, by the code that ships. Every node runs a real Relay whose
// sprayers (rail choice, deadlines, rail health) send over the simulated
// transport (broadcast/transport/sim) under its clock; the shape (chains or
// trees, version_shape) and the plan come from the real planner (plan_trees
// over every GPU, grouped by node) and are
// re-planned by it when nodes die, each new parent sending only what its new
// child lacks, as the producer's rounds do. What is modelled rather than run:
// the control plane (a death is noticed two hops after it, or `detect_seconds`,
// as FaultSpec says), and the GPUs inside a node, which take the version from
// the GPU it entered at over the node's own links (NVLink/PCIe), one after
// another, cut-through. Baselines go through the same network and sprayers:
// a binary tree of nodes (each forwarding everything to two children, like a
// tree relay) and one ring/chain through every node in order (one stripe, as
// NCCL's ring broadcast).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/status.h"

namespace deltacast::bench {

struct ClusterSpec {
  uint32_t nodes = 16;                  // rollout nodes
  uint32_t gpus_per_node = 8;           // consumers per node
  uint32_t rails = 8;                   // NICs per node, the producer's too
  double rail_bytes_per_second = 50e9;  // each way (400 Gbit/s)
  double latency_seconds = 5e-6;        // one network hop
  double node_limit_bytes_per_second = 0;  // what a node's PCIe takes across its rails, each way (0: no limit)
  double intra_bytes_per_second = 450e9;   // GPU to GPU inside a node (NVLink, each way)
  double intra_latency_seconds = 2e-6;
  std::map<uint32_t, double> rate_factor;  // node -> its rails' rate factor (0.1: a 10x-slow node)
  uint32_t stripes = 0;                    // deltacast's stripes (0: as version_shape picks them)
  uint32_t fanout = 0;                     // deltacast's shape: 0 as version_shape picks it, 1 chains, k trees
  double slice_cost_seconds = 10e-6;       // what a port spends per slice besides its bytes
  double slice_alpha_seconds = 0;          // per-slice cost in the slice-size model (0: slice_cost_seconds)
  // Sites: the nodes in this many equal blocks, the producer in the first; every two sites joined
  // by a WAN link of this rate each way, the links' latencies spread evenly from min to max.
  uint32_t sites = 1;
  double wan_bytes_per_second = 12.5e9;  // 100 Gbit/s
  double wan_latency_min_seconds = 0.02;
  double wan_latency_max_seconds = 0.08;
  // The version reported, where it has no faults, is simulated until every node takes slices at
  // a steady rate, then finished at those rates (SimCluster::steady_at, cluster_sim.cc): what
  // makes the largest versions to 65,536 GPUs fit in minutes. Off: every slice is simulated.
  bool extrapolate = false;
};

// The site of rollout node k (0-based) and the latency of the WAN link between two sites.
uint32_t site_of_node(const ClusterSpec& c, uint32_t k);
double wan_latency_seconds(const ClusterSpec& c, uint32_t site_a, uint32_t site_b);

enum class SimTopology { kDeltacast, kBinaryTree, kRing };

struct FaultSpec {
  double dead_fraction = 0;      // of the nodes, dying at random times during the version
  // Until the producer notices a death and re-plans. 0: the node's processes were killed, so
  // their connections reset: the producer hears of it one hop later (its control link to them
  // closes) and its re-plan reaches the parents one hop after that. A silent death (a hung host,
  // a pulled cable) is noticed after the control link's dead_after, 1.5 s.
  double detect_seconds = 0;
  // The dying nodes hang instead (a frozen host, a dead NIC): their ports go silent and their
  // connections stay open. Their parents' relays, hearing nothing of them, report them after
  // RelayOptions::unheard_after and the producer moves them to the tails; their control links
  // drop them after `detect_seconds` (0: the control link's dead_after, 1.5 s).
  bool silent = false;
  uint32_t flapping_rails = 0;   // rails (of random nodes) that go down and come back
  // Every WAN link of this site but the one to `cut_wan_keep` fails at `cut_wan_at` of the bound
  // (0: none; sites > 2 only): whichever site fed it, its nodes, unreachable from their parents,
  // go on from the site it still reaches.
  uint32_t cut_wan_site = 0;
  uint32_t cut_wan_keep = 1;
  double cut_wan_at = 0.3;
  double flap_down_seconds = 0.02;
  uint64_t seed = 1;
};

struct SimResult {
  std::vector<double> consumer_seconds;  // per GPU, node by node (negative: its node died)
  double seconds = 0;                    // the last surviving consumer
  // The best the alpha-beta model gives over every shape the planner builds (version_shape's
  // bound_seconds) over the nodes, at a node's rate (its rails, within its PCIe limit) and one
  // hop's latency and slice cost.
  double bound_seconds = 0;
  // Chains' part of it: the pipelined bound (pipelined_bound) of a chain through every node.
  double chain_bound_seconds = 0;
  uint32_t fanout = 1;  // the shape it went out in (1: chains)
  double median_seconds = 0;
  bool survivors_complete = false;
  uint32_t stripes = 0;
  uint32_t slice_bytes = 0;
  uint32_t slices = 0;
  uint32_t dead_nodes = 0;
  uint32_t replans = 0;
  uint64_t events = 0;
  double wall_seconds = 0;
  // This process's memory in transparent huge pages as the simulation ended, its cluster still
  // held (simulate/huge_pages.h; simulations side by side share the process).
  uint64_t huge_page_bytes = 0;
  uint64_t producer_bytes_out = 0;  // what the producer's rails carried
  uint64_t max_node_bytes_out = 0;  // the busiest rollout node's rails, out
  // Bytes that crossed the WAN into each site in this version, over the version's bytes (site 0,
  // the producer's, takes none).
  std::vector<double> wan_copies;
  // The share of each node's slices the event simulation ran (1: all; less where the rest was
  // extrapolated at the node's steady rate, ClusterSpec::extrapolate).
  double simulated_share = 1;
  // The nodes this version's chains had at their tails: the rate book's verdict on the versions
  // before (every relay's link reports, as `staged` messages carry them).
  std::vector<uint32_t> slow_nodes;
};

// The pipelined-broadcast lower bound for `bytes` to `receivers` over links of `bandwidth` and
// per-hop latency `alpha`: (sqrt(S/B) + sqrt((N-1) alpha))^2.
double pipelined_bound(uint64_t bytes, uint32_t receivers, double bandwidth, double alpha);

// Broadcasts `versions` (their bytes) one after another to one simulated cluster and reports the
// last: the ones before warm it up as a producer's earlier rounds do (the sprayers have measured
// the rails, the rate book the nodes, whose verdict plans the next version). `faults` are
// injected during the last version.
Result<SimResult> simulate_versions(const ClusterSpec& cluster, const std::vector<uint64_t>& versions,
                                    SimTopology topology, const FaultSpec& faults);

}  // namespace deltacast::bench
