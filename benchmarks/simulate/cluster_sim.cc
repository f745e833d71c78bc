#include "simulate/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>

#include "broadcast/engine/control/control_link.h"
#include "broadcast/engine/plan/planner.h"
#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/engine/plan/standby_links.h"
#include "broadcast/engine/plan/wan_paths.h"
#include "broadcast/engine/relay.h"
#include "broadcast/engine/round.h"
#include "broadcast/transport/sim/transport.h"
#include "simulate/huge_pages.h"

namespace deltacast::bench {

namespace {

using sim::Duration;
constexpr uint32_t kProducer = 0;  // node id of the producer; rollout node k is id k + 1
constexpr Duration kPollEvery = std::chrono::milliseconds(1);
// ClusterSpec::extrapolate: the first milestone, in slices held per stripe, and how closely two
// successive extrapolations of the version's end must agree for the pipeline to count as steady.
constexpr uint32_t kFirstMilestonePerStripe = 64;
constexpr double kSteadyTolerance = 0.025;

// The simulation moves no bytes: this stands for the version's buffer, never read.
const uint8_t* version_bytes() {
  static const uint8_t nothing[1] = {0};
  return nothing;
}

Duration span(double seconds) { return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds)); }
double at_seconds(TimePoint t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

std::string rail_host(uint32_t node, uint32_t rail) {
  return node == kProducer ? fmt::format("producer.r{}", rail) : fmt::format("n{}.r{}", node - 1, rail);
}

struct Node;

// A node's receiving end: counts first arrivals and hands each to the node's forwarding.
struct NodeSink : SliceSink {
  Node* node = nullptr;
  Result<Landing> begin(const SliceRef&, CancelReceive) override { return Landing{}; }
  bool complete(const SliceRef& slice, const Landing&, bool verified) override;
};

struct Node {
  uint32_t id = 0;
  std::vector<Endpoint> local_rails;
  NodeSink sink;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Relay> relay;                     // chains (deltacast, ring)
  std::vector<std::unique_ptr<Sprayer>> tree_kids;  // binary tree: every slice to each child
  std::vector<uint8_t> have;
  uint32_t held = 0;
  std::vector<TimePoint> stripe_last;  // when the last slice of each stripe arrived
  TimePoint first{};
  bool alive = true;
  uint64_t bytes_out_before = 0;  // what its rails carried out in earlier versions
  sim::EventLoop* loop = nullptr;
  uint32_t stripes = 1;
  uint64_t transfer = 0;  // the version under way
  size_t* incomplete = nullptr;  // the cluster's count of living nodes still missing slices
  // ClusterSpec::extrapolate: the cluster's milestones (slices held), when this node reached
  // each, and the cluster's count of living nodes that reached each.
  const std::vector<uint32_t>* milestones = nullptr;
  std::vector<TimePoint> milestone_at;
  std::vector<size_t>* reached = nullptr;
  double extrapolated_end = 0;  // seconds into the version (0: not extrapolated)

  void arrived(uint32_t slice) {
    if (!alive || slice >= have.size() || have[slice]) return;
    if (held == 0) first = loop->now();
    have[slice] = 1;
    ++held;
    stripe_last[slice % stripes] = loop->now();
    if (milestones != nullptr && milestone_at.size() < milestones->size() && held == (*milestones)[milestone_at.size()]) {
      milestone_at.push_back(loop->now());
      ++(*reached)[milestone_at.size() - 1];
    }
    if (complete()) --*incomplete;
    if (relay) relay->on_slice(transfer, slice, 0);
    for (auto& kid : tree_kids) kid->offer(slice, 0);
  }
  bool complete() const { return held == have.size(); }
};

bool NodeSink::complete(const SliceRef& slice, const Landing&, bool verified) {
  if (!node->alive) return false;
  if (verified) node->arrived(slice.index);
  return verified;
}

// Chains over every GPU from the real planner, collapsed to the nodes they pass through: the
// planner enters each node once per stripe, and with nodes slow whole (as simulated) a node's
// GPUs are consecutive in every chain. `order[s][node]`: the node's GPUs in
// stripe s's order, as positions 0..gpus-1 of that node.
struct NodePlan {
  std::vector<std::map<uint32_t, uint32_t>> parent;              // per stripe: node -> the node it takes it from
  std::vector<std::map<uint32_t, std::vector<uint32_t>>> order;  // per stripe: node -> GPU positions
};

// A GPU's position within its node.
uint32_t id_position(const ClusterSpec& c, uint32_t id) { return (id - 1) % c.gpus_per_node; }

// The member ids of rollout node k's GPUs, as the simulation numbers them.
std::vector<uint32_t> gpu_ids(const ClusterSpec& c, uint32_t k) {
  std::vector<uint32_t> ids;
  for (uint32_t g = 0; g < c.gpus_per_node; ++g) ids.push_back(k * c.gpus_per_node + g + 1);
  return ids;
}

// Every GPU's site but the producer's site's, as consumers name them.
SiteOf site_map(const ClusterSpec& c) {
  SiteOf sites;
  for (uint32_t k = 0; k < c.nodes && c.sites > 1; ++k) {
    const uint32_t site = site_of_node(c, k);
    if (site == 0) continue;
    for (uint32_t id : gpu_ids(c, k)) sites[id] = fmt::format("s{}", site);
  }
  return sites;
}

// Every node's site (by node id, the producer's site unnamed), named as site_map names its GPUs'.
SiteOf node_site_map(const ClusterSpec& c) {
  SiteOf sites;
  for (uint32_t k = 0; k < c.nodes && c.sites > 1; ++k) {
    if (const uint32_t site = site_of_node(c, k); site != 0) sites[k + 1] = fmt::format("s{}", site);
  }
  return sites;
}

// Every GPU's node, as consumers name them.
NodeOf node_map(const ClusterSpec& c) {
  NodeOf nodes;
  for (uint32_t k = 0; k < c.nodes; ++k) {
    for (uint32_t id : gpu_ids(c, k)) nodes[id] = fmt::format("n{}", k);
  }
  return nodes;
}

// deltacast's plan: the real planner over every GPU, grouped by node and site.
Plan plan_gpus(const ClusterSpec& c, const std::vector<uint32_t>& alive_nodes, uint32_t stripes, uint32_t fanout,
               const std::vector<uint32_t>& slow_nodes) {
  std::vector<uint32_t> members;
  std::vector<uint32_t> slow;
  for (uint32_t k : alive_nodes) {
    for (uint32_t id : gpu_ids(c, k)) {
      members.push_back(id);
      if (std::find(slow_nodes.begin(), slow_nodes.end(), k) != slow_nodes.end()) slow.push_back(id);
    }
  }
  return plan_trees(members, stripes, fanout, slow, node_map(c), site_map(c));
}

// A plan over GPUs collapsed to the nodes it passes through: each stripe enters each node once
// (at its entry GPU), from the producer or another node.
Result<NodePlan> collapse(const ClusterSpec& c, const Plan& plan) {
  NodePlan out;
  out.order.resize(plan.stripes());
  out.parent.resize(plan.stripes());
  const auto node_of = [&](uint32_t id) { return (id - 1) / c.gpus_per_node + 1; };
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    for (size_t i = 0; i < order.size(); ++i) {
      const uint32_t node = node_of(order[i]);
      const uint32_t from = plan.fed_by[s][i];
      const uint32_t parent = from == Plan::kFromProducer ? kProducer : node_of(order[from]);
      if (parent != node && !out.parent[s].emplace(node, parent).second) {
        return internal_error("stripe {}: the planner split node {}'s GPUs", s, node - 1);
      }
      out.order[s][node].push_back(id_position(c, order[i]));
    }
  }
  return out;
}

// Who each node (the producer included) sends each stripe to.
std::map<uint32_t, StripeChildren> children_of(const NodePlan& plan, uint32_t stripes) {
  std::map<uint32_t, StripeChildren> children;
  for (uint32_t s = 0; s < plan.parent.size(); ++s) {
    for (const auto& [node, parent] : plan.parent[s]) {
      auto& kids = children[parent];
      kids.resize(stripes);
      kids[s].push_back(node);
    }
  }
  return children;
}

}  // namespace

double pipelined_bound(uint64_t bytes, uint32_t receivers, double bandwidth, double alpha) {
  const double a = std::sqrt(static_cast<double>(bytes) / bandwidth);
  const double b = std::sqrt(std::max<double>(0, receivers - 1.0) * alpha);
  return (a + b) * (a + b);
}

namespace {

// One simulated cluster: its network, every node's listener and relay, and the producer's rate
// book, kept across versions as a producer keeps them across rounds.
class SimCluster {
 public:
  SimCluster(const ClusterSpec& c, SimTopology topology) : c_(c), topology_(topology) {}
  Status build();
  // Broadcasts one version of `bytes` (`faults` injected during it) and reports it.
  // `last`: the version reported (the only one ClusterSpec::extrapolate may cut short: the ones
  // before teach the rate book and the sprayers, whole).
  Result<SimResult> run_version(uint64_t bytes, const FaultSpec& faults, bool last = true);

 private:
  Status follow_plan(uint32_t stripes, std::vector<std::map<uint32_t, std::vector<uint32_t>>>& gpu_order);
  // The standby links over the living nodes and the producer, as a round plans them.
  std::map<uint32_t, std::vector<uint32_t>> standby_now() const;
  Status grow_tree(uint64_t transfer, uint64_t bytes, uint32_t slice_bytes, const std::vector<uint64_t>& checksums);
  void set_milestones(uint32_t slices, uint32_t stripes);
  bool steady_at(size_t milestone, TimePoint t0, uint32_t slices);
  void finish_version(uint32_t slice_bytes);

  ClusterSpec c_;
  SimTopology topology_;
  sim::SimNetwork net_;
  std::shared_ptr<sim::SimTransport> transport_ = std::make_shared<sim::SimTransport>(&net_);
  SprayOptions spray_;
  std::vector<std::unique_ptr<Node>> nodes_;  // [0]: the producer
  std::map<uint32_t, PeerEndpoints> directory_;
  std::vector<uint32_t> alive_;  // rollout nodes by index
  RateBook book_;
  Plan plan_;  // over GPUs (ids k * gpus_per_node + g + 1), as a round plans its members
  uint64_t transfer_ = 0;
  // Living nodes that do not hold the version under way yet: the loop's stop condition, checked
  // after every event, so it is kept as a count instead of a scan of every node.
  size_t incomplete_ = 0;
  // ClusterSpec::extrapolate, for the version under way: slices held per node at which each node
  // notes the time, and how many living nodes have reached each.
  std::vector<uint32_t> milestones_;
  std::vector<size_t> reached_;
};

Status SimCluster::build() {
  if (c_.nodes == 0 || c_.gpus_per_node == 0 || c_.rails == 0) return invalid_argument("an empty cluster");
  if (c_.rail_bytes_per_second <= 0 || c_.intra_bytes_per_second <= 0) return invalid_argument("rates must be positive");
  if (c_.sites == 0 || c_.sites > c_.nodes) return invalid_argument("{} sites for {} nodes", c_.sites, c_.nodes);
  net_.set_latency(span(c_.latency_seconds));
  for (uint32_t a = 0; a < c_.sites && c_.sites > 1; ++a) {
    for (uint32_t b = a + 1; b < c_.sites; ++b) {
      net_.set_wan(a, b, c_.wan_bytes_per_second, span(wan_latency_seconds(c_, a, b)));
    }
  }
  net_.set_slice_cost(span(c_.slice_cost_seconds));
  spray_.clock = &net_.clock();
  spray_.scheduler_thread = false;
  // Ports: every rail of every node (the producer is node 0), at the rail rate times the node's
  // factor, sharing the node's PCIe limit.
  for (uint32_t n = 0; n <= c_.nodes; ++n) {
    const auto factor = n == kProducer ? c_.rate_factor.end() : c_.rate_factor.find(n - 1);
    const double rate = c_.rail_bytes_per_second * (factor == c_.rate_factor.end() ? 1.0 : factor->second);
    auto node = std::make_unique<Node>();
    node->id = n;
    node->loop = &net_.loop();
    node->incomplete = &incomplete_;
    node->sink.node = node.get();
    for (uint32_t r = 0; r < c_.rails; ++r) {
      const std::string host = rail_host(n, r);
      net_.set_port_rates(host, rate, rate);
      if (c_.sites > 1) net_.set_site(host, n == kProducer ? 0 : site_of_node(c_, n - 1));
      if (c_.node_limit_bytes_per_second > 0) net_.set_node(host, fmt::format("node{}", n));
      node->local_rails.push_back(Endpoint{host, 0});
    }
    if (c_.node_limit_bytes_per_second > 0) net_.set_node_limit(fmt::format("node{}", n), c_.node_limit_bytes_per_second);
    if (n != kProducer) {
      DC_ASSIGN_OR_RETURN(node->listener, transport_->listen(node->local_rails, &node->sink, {}));
      directory_[n] = node->listener->endpoints();
      alive_.push_back(n - 1);
    }
    if (topology_ != SimTopology::kBinaryTree) {
      node->relay = std::make_unique<Relay>(RelayOptions{transport_, node->local_rails, {}, spray_});
    }
    nodes_.push_back(std::move(node));
  }
  return Status();
}

// Tells every relay its children in plan_, with what each node holds already, as a round's
// announce and replan do.
Status SimCluster::follow_plan(uint32_t stripes, std::vector<std::map<uint32_t, std::vector<uint32_t>>>& gpu_order) {
  DC_ASSIGN_OR_RETURN(const NodePlan nodes, collapse(c_, plan_));
  for (uint32_t s = 0; s < stripes; ++s) gpu_order[s] = nodes.order[std::min<size_t>(s, nodes.order.size() - 1)];
  const auto children = children_of(nodes, stripes);
  std::map<uint32_t, std::vector<bool>> have;
  for (const auto& node : nodes_) {
    if (node->alive && node->id != kProducer) have[node->id] = std::vector<bool>(node->have.begin(), node->have.end());
  }
  const StripeChildren none(stripes);
  // The WAN paths into children in other sites, as a round tells its members (node ids in the book).
  const auto site = [&](uint32_t n) { return std::to_string(n == kProducer ? 0 : site_of_node(c_, n - 1)); };
  const WanPaths paths = c_.sites > 1 ? wan_paths(book_, children, site) : WanPaths{};
  // The standby links between sites' first nodes (the producer its own site's), as a round tells
  // its members (standby_links.h).
  const auto standby = standby_now();
  for (const auto& node : nodes_) {
    if (!node->alive) continue;
    auto kids = children.find(node->id);
    DC_RETURN_IF_ERROR(node->relay->set_children(kids == children.end() ? none : kids->second, directory_, have,
                                                 paths_from(paths, node->id)));
    std::map<uint32_t, PeerEndpoints> watched;
    if (const auto it = standby.find(node->id); it != standby.end()) {
      for (uint32_t peer : it->second) watched[peer] = directory_.at(peer);
    }
    DC_RETURN_IF_ERROR(node->relay->watch(watched));
  }
  return Status();
}

std::map<uint32_t, std::vector<uint32_t>> SimCluster::standby_now() const {
  if (c_.sites <= 1) return {};
  std::vector<uint32_t> living;
  for (const auto& node : nodes_) {
    if (node->alive) living.push_back(node->id);  // the producer (kProducer) among them
  }
  return standby_links(living, node_site_map(c_));
}

// The binary tree: the node at heap position p (the producer feeds position 0) sends everything
// to 2p+1 and 2p+2, one sprayer per child.
Status SimCluster::grow_tree(uint64_t transfer, uint64_t bytes, uint32_t slice_bytes,
                             const std::vector<uint64_t>& checksums) {
  for (uint32_t n = 0; n <= c_.nodes; ++n) {
    nodes_[n]->tree_kids.clear();
    std::vector<uint32_t> kids;
    if (n == kProducer) {
      kids = {1};
    } else {
      for (uint32_t k : {2 * (n - 1) + 1, 2 * (n - 1) + 2}) {
        if (k < c_.nodes) kids.push_back(k + 1);
      }
    }
    for (uint32_t kid : kids) {
      std::vector<std::unique_ptr<Channel>> channels;
      for (uint32_t r = 0; r < c_.rails; ++r) {
        RailSpec rail;
        rail.local = nodes_[n]->local_rails[r];
        rail.remote = directory_[kid][r];
        rail.name = fmt::format("{}-{}.r{}", n, kid, r);
        DC_ASSIGN_OR_RETURN(auto channel, transport_->connect(rail, {}));
        channels.push_back(std::move(channel));
      }
      auto sprayer = std::make_unique<Sprayer>(std::move(channels), spray_);
      DC_RETURN_IF_ERROR(sprayer->open(transfer, version_bytes(), bytes, slice_bytes).status());
      if (n == kProducer) sprayer->offer_all(checksums);
      nodes_[n]->tree_kids.push_back(std::move(sprayer));
    }
  }
  return Status();
}

// ClusterSpec::extrapolate: a node notes when it holds 64 slices per stripe, then twice as many,
// and so on up to half the version (past that, simulating the rest costs less than it saves),
// and at half the version itself after a ladder of three or more, where that is a quarter past the
// last doubling. Without it a ladder that ran out early left the whole version to simulate (trees
// 4 wide, 4 stripes, 32 GB to 65,536 consumers: its last count was 2,048 of 7,630 slices, where
// two estimates 2.7% apart missed the 2.5% by a hair; with it, 50% simulated and 0.5% under the
// whole simulation; 16 GB to 1,024 consumers, three counts before it: 1.4% under). A shorter
// ladder is a version short enough to simulate whole, and from its first half the end erred more
// (8 GB to 1,024 consumers, trees 4 wide, two counts: 2.5% early).
void SimCluster::set_milestones(uint32_t slices, uint32_t stripes) {
  milestones_.clear();
  for (uint64_t m = uint64_t{kFirstMilestonePerStripe} * stripes; 2 * m <= slices; m *= 2) {
    milestones_.push_back(static_cast<uint32_t>(m));
  }
  if (const uint32_t half = slices / 2; milestones_.size() >= 3 && half >= milestones_.back() + milestones_.back() / 4) {
    milestones_.push_back(half);
  }
  reached_.assign(milestones_.size(), 0);
  for (auto& node : nodes_) {
    node->milestones = c_.extrapolate ? &milestones_ : nullptr;
    node->reached = &reached_;
    node->milestone_at.clear();
    node->extrapolated_end = 0;
  }
}

// Every living node holds milestone `m` (m >= 2): each node's end is extrapolated twice, from
// milestone m-1 at its rate between m-2 and m-1, and from m at its rate between m-1 and m. Where
// the last node's and the median node's ends agree within kSteadyTolerance the pipeline is
// steady: each node's end is its second estimate, and the version may stop here. (Checked
// against the whole simulation in tests/bench/check_simulate.py.)
bool SimCluster::steady_at(size_t m, TimePoint t0, uint32_t slices) {
  if (m < 2) return false;
  const double total = slices;
  const auto at = [&](const Node& n, size_t k) { return at_seconds(n.milestone_at[k]) - at_seconds(t0); };
  const auto end_from = [&](const Node& n, size_t k) {
    const double rate = (milestones_[k] - milestones_[k - 1]) / (at(n, k) - at(n, k - 1));
    return at(n, k) + (total - milestones_[k]) / rate;
  };
  std::vector<double> before, now;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (!n.alive) continue;
    if (at(n, m) <= at(n, m - 1) || at(n, m - 1) <= at(n, m - 2)) return false;  // no rate to go on
    before.push_back(end_from(n, m - 1));
    now.push_back(end_from(n, m));
  }
  const auto agree = [](std::vector<double> a, std::vector<double> b, size_t k) {
    std::nth_element(a.begin(), a.begin() + k, a.end());
    std::nth_element(b.begin(), b.begin() + k, b.end());
    return std::abs(a[k] - b[k]) <= kSteadyTolerance * b[k];
  };
  if (now.empty() || !agree(before, now, now.size() - 1) || !agree(before, now, now.size() / 2)) return false;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    if (n.alive) n.extrapolated_end = end_from(n, m);
  }
  return true;
}

Result<SimResult> SimCluster::run_version(uint64_t bytes, const FaultSpec& faults, bool last) {
  if (bytes == 0) return invalid_argument("a version of 0 bytes");
  const auto wall_start = std::chrono::steady_clock::now();
  const TimePoint t0 = net_.loop().now();
  const auto since_start = [&](TimePoint t) { return at_seconds(t) - at_seconds(t0); };

  // The version's shape, as a round picks it (version_shape: stripes, and the alpha-beta slice
  // size for chains through every consumer over the nodes' rails); the slow nodes from the rate book.
  // The rate is the rate book's healthy rate, as a round takes it; before anyone is measured
  // (and for the binary tree, which has no relays to report links) the nodes' rails' rate, as a
  // producer given its NICs' speed (ProducerOptions::round.default_rate) would. (Left at its
  // default, 1 Gbit/s, a first round to nodes of 400 Gbit rails goes in 64 KiB slices, and
  // the rate book did not find a 10x-slow node from such a round at 128 nodes.)
  const uint32_t consumers = c_.nodes * c_.gpus_per_node;
  const double node_rate = c_.rail_bytes_per_second * c_.rails;
  std::vector<uint32_t> members;
  for (uint32_t k : alive_) members.push_back(k + 1);
  const SlowVerdict verdict = book_.judge(members);
  const bool measured = topology_ != SimTopology::kBinaryTree && verdict.healthy > 0;
  const double rate = measured ? verdict.healthy : std::max(node_rate, verdict.partial);
  // The per-slice cost the slices are sized with: the network's own (what a producer would be
  // configured with for it), unless told otherwise; a network that charges nothing per slice
  // gets the rounds' default.
  const double alpha = c_.slice_alpha_seconds > 0   ? c_.slice_alpha_seconds
                       : c_.slice_cost_seconds > 0 ? c_.slice_cost_seconds
                                                   : RoundOptions{}.alpha_seconds;
  const bool deltacast = topology_ == SimTopology::kDeltacast;
  // The WAN as a round measures it: half the longest base round trip of the last round's links
  // across sites (node ids in the book: the producer is node 0, in site 0).
  const auto site_of_id = [&](uint32_t n) { return n == kProducer ? 0 : site_of_node(c_, n - 1); };
  const WanPath wan{c_.sites, book_.longest_round_trip([&](uint32_t sender, uint32_t child) {
                      return site_of_id(sender) != site_of_id(child);
                    }) / 2};
  const VersionShape planned =
      version_shape(bytes, consumers, static_cast<uint32_t>(alive_.size()), rate, c_.rails, alpha,
                    deltacast ? c_.stripes : 1, 0, measured ? verdict.slice_bytes : 0, deltacast ? c_.fanout : 1, wan);
  const uint32_t stripes = planned.stripes;
  const uint32_t slice_bytes = planned.slice_bytes;
  DC_ASSIGN_OR_RETURN(const TransferShape shape, TransferShape::make(++transfer_, bytes, slice_bytes));
  std::vector<uint32_t> slow;
  if (topology_ == SimTopology::kDeltacast) {
    for (uint32_t id : verdict.slow) slow.push_back(id - 1);
  }

  const std::vector<uint64_t> source_checksums(shape.slices(), 0);
  incomplete_ = alive_.size();
  for (auto& node : nodes_) {
    if (!node->alive) continue;
    node->stripes = stripes;
    node->transfer = shape.id;
    node->have.assign(shape.slices(), node->id == kProducer ? 1 : 0);
    node->held = node->id == kProducer ? shape.slices() : 0;
    node->stripe_last.assign(stripes, t0);
    node->first = t0;
    if (node->relay) {
      node->relay->begin(shape, version_bytes(), stripes, node->id == kProducer ? &source_checksums : nullptr);
    }
  }
  // A version with faults is simulated whole: they change its pace after any steady stretch.
  const bool faultless = faults.dead_fraction == 0 && faults.flapping_rails == 0 && faults.cut_wan_site == 0;
  set_milestones(faultless && last ? shape.slices() : 0, stripes);
  SimResult result;
  result.stripes = stripes;
  result.slice_bytes = slice_bytes;
  result.slices = shape.slices();
  result.slow_nodes = slow;
  result.fanout = topology_ == SimTopology::kBinaryTree ? 2 : planned.fanout;
  const double node_limit = c_.node_limit_bytes_per_second > 0 ? c_.node_limit_bytes_per_second : node_rate;
  const double hop_alpha = c_.latency_seconds + c_.slice_cost_seconds;
  result.chain_bound_seconds = pipelined_bound(bytes, c_.nodes, std::min(node_rate, node_limit), hop_alpha);
  // Across sites the bound is the model's best over the shapes with the WAN in it (every site
  // entered from the producer's in one hop, the farthest's latency), and no less than the WAN
  // floor: the version over one WAN link plus that latency.
  WanPath farthest{c_.sites, 0};
  for (uint32_t site = 1; site < c_.sites; ++site) {
    farthest.one_way_seconds = std::max(farthest.one_way_seconds, wan_latency_seconds(c_, 0, site));
  }
  const double shapes_bound =
      version_shape(bytes, consumers, c_.nodes, std::min(node_rate, node_limit), c_.rails, hop_alpha, 0, 0, 0, 0, farthest)
          .bound_seconds;
  result.bound_seconds =
      c_.sites > 1 ? std::max(shapes_bound, static_cast<double>(bytes) / c_.wan_bytes_per_second + farthest.one_way_seconds)
                   : std::min(result.chain_bound_seconds, shapes_bound);
  std::vector<std::map<uint32_t, std::vector<uint32_t>>> gpu_order(stripes);
  if (topology_ == SimTopology::kBinaryTree) {
    DC_RETURN_IF_ERROR(grow_tree(shape.id, bytes, slice_bytes, source_checksums));
    for (uint32_t k = 0; k < c_.nodes; ++k) {
      for (uint32_t g = 0; g < c_.gpus_per_node; ++g) gpu_order[0][k + 1].push_back(g);
    }
  } else {
    if (topology_ == SimTopology::kDeltacast) {
      plan_ = plan_gpus(c_, alive_, stripes, planned.fanout, slow);
    } else {  // one chain through every GPU, node by node
      std::vector<uint32_t> every_gpu;
      for (uint32_t k : alive_) {
        for (uint32_t id : gpu_ids(c_, k)) every_gpu.push_back(id);
      }
      plan_ = plan_from_chains({every_gpu});
    }
    DC_RETURN_IF_ERROR(follow_plan(stripes, gpu_order));
  }

  // Faults: nodes that die at random times (noticed detect_seconds later, then re-planned
  // around), and rails that go down for a moment.
  std::mt19937_64 rng(faults.seed);
  const double expected = result.bound_seconds;
  Status replan_error;
  // This version's events refer to its locals: once it is over, those still queued do nothing.
  const auto live = std::make_shared<bool>(true);
  if (faults.dead_fraction > 0) {
    if (topology_ == SimTopology::kBinaryTree) return invalid_argument("node deaths are simulated for chains only");
    const auto dying = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(faults.dead_fraction * c_.nodes)));
    const Duration detect = faults.detect_seconds > 0 ? span(faults.detect_seconds)
                            : faults.silent           ? span(ControlLinkOptions{}.dead_after.count() / 1000.0)
                                                      : 2 * net_.latency();
    std::vector<uint32_t> order = alive_;
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t i = 0; i + 1 < order.size() && i < dying; ++i) {
      const uint32_t k = order[i];
      const double when = std::uniform_real_distribution<double>(0.1, 0.9)(rng) * expected;
      net_.loop().at(t0 + span(when), [&, k, stripes, live, detect] {
        if (!*live) return;
        Node& node = *nodes_[k + 1];
        if (!node.complete()) --incomplete_;
        node.alive = false;
        if (faults.silent) {
          for (uint32_t r = 0; r < c_.rails; ++r) net_.set_port_up(rail_host(k + 1, r), false);
        } else {
          node.listener->close();
          node.relay->end();
        }
        ++result.dead_nodes;
        net_.loop().after(detect, [&, k, stripes, live] {
          if (!*live) return;
          alive_.erase(std::remove(alive_.begin(), alive_.end(), k), alive_.end());
          ++result.replans;
          plan_ = without_members(plan_, gpu_ids(c_, k), node_map(c_), site_map(c_));  // as a round re-plans
          if (Status s = follow_plan(stripes, gpu_order); !s.ok()) replan_error = s;
        });
      });
    }
  }
  if (faults.cut_wan_site > 0) {
    if (faults.cut_wan_site >= c_.sites || faults.cut_wan_keep >= c_.sites || faults.cut_wan_keep == faults.cut_wan_site) {
      return invalid_argument("site {} cut off but for its link to site {}: not among {} sites", faults.cut_wan_site,
                              faults.cut_wan_keep, c_.sites);
    }
    net_.loop().at(t0 + span(faults.cut_wan_at * expected), [this, faults, live] {
      if (!*live) return;
      for (uint32_t other = 0; other < c_.sites; ++other) {
        if (other != faults.cut_wan_site && other != faults.cut_wan_keep) net_.set_wan_up(other, faults.cut_wan_site, false);
      }
    });
  }
  std::vector<uint64_t> wan_before(c_.sites);
  for (uint32_t s = 0; s < c_.sites; ++s) wan_before[s] = net_.wan_bytes_into(s);
  for (uint32_t i = 0; i < faults.flapping_rails; ++i) {
    const uint32_t k = alive_[rng() % alive_.size()];
    const std::string host = rail_host(k + 1, static_cast<uint32_t>(rng() % c_.rails));
    const double when = std::uniform_real_distribution<double>(0.05, 0.8)(rng) * expected;
    net_.loop().at(t0 + span(when), [this, host] { net_.set_port_up(host, false); });
    net_.loop().at(t0 + span(when + faults.flap_down_seconds), [this, host] { net_.set_port_up(host, true); });
  }

  // The sprayers have no threads: a tick polls them (deadlines, probes) every simulated
  // millisecond while the version is under way. It also passes on what the relays find
  // unreachable, as consumers report it: two hops later the producer moves those nodes to the
  // tails, as a round does.
  const auto everyone_done = [&] { return incomplete_ == 0; };
  std::set<std::pair<uint32_t, uint32_t>> reported;  // (parent node, child node), once each
  // Per sentinel node, what its standby links did not hear: as it last sent it, and as the producer
  // knows it.
  std::map<uint32_t, std::vector<uint32_t>> unheard_sent, unheard_known;
  std::map<uint32_t, uint32_t> tailed;                // nodes moved to the tails, how many times
  const SiteOf sites = site_map(c_);
  // WAN links found broken in this version (a parent that cannot reach its child in another
  // site), which a move then avoids, as a round's do (RoundDriver::note_broken_link).
  BrokenLinks broken;
  const auto site_name = [&](uint32_t node) {
    return node == kProducer || site_of_node(c_, node - 1) == 0 ? std::string()
                                                                : site_of(sites, gpu_ids(c_, node - 1).front());
  };
  // The nodes that feed `child` now, in any stripe (kProducer for the producer).
  const auto parent_nodes = [&](uint32_t child) {
    std::set<uint32_t> parents;
    for (uint32_t s = 0; s < plan_.stripes(); ++s) {
      for (uint32_t id : gpu_ids(c_, child - 1)) {
        const uint32_t from = plan_.parent(id, s);
        const uint32_t node = from == 0 ? kProducer : (from - 1) / c_.gpus_per_node + 1;
        if (node != child) parents.insert(node);
      }
    }
    return parents;
  };
  // Whether `parent` feeds any of `child`'s GPUs in some stripe of the plan now (a report from
  // a node that no longer does is stale: the child moved since).
  const auto feeds = [&](uint32_t parent, uint32_t child) { return parent_nodes(child).count(parent) != 0; };
  // Moves `child`, reported by `parent`, to the tails as a round does.
  const auto move_child = [&](uint32_t parent, uint32_t child) {
    if (std::find(alive_.begin(), alive_.end(), child - 1) == alive_.end()) return;
    // A node moves once (a hung one would go round the tails), or, reported by a parent in
    // another site, again while there are sites to try (its site's links to more than one site
    // failed), as a round moves members; a report from a node that no longer feeds it is stale.
    if (!feeds(parent, child)) return;
    const bool across = c_.sites > 1 && (parent == kProducer ? site_of_node(c_, child - 1) != 0
                                                             : site_of_node(c_, parent - 1) != site_of_node(c_, child - 1));
    const uint32_t times = tailed.count(child) ? tailed.at(child) : 0;
    if (times > 0 && !(across && times <= c_.sites)) return;
    ++result.replans;
    ++tailed[child];
    if (across) broken.insert({site_name(parent), site_name(child)});
    BrokenLinks avoid = broken;
    avoid.merge(unheard_links(unheard_known, standby_now(), node_site_map(c_)));
    plan_ = to_tails(plan_, gpu_ids(c_, child - 1), sites, nullptr, avoid);
    if (Status s = follow_plan(stripes, gpu_order); !s.ok()) replan_error = s;
  };
  std::set<std::pair<uint32_t, uint32_t>> reported_early;  // (parent node, child node), once each
  std::set<std::pair<uint32_t, uint32_t>> early;           // early reports the producer holds
  std::function<void()> tick;
  const auto reschedule = [&] {
    if (!everyone_done()) net_.loop().after(kPollEvery, tick);
  };
  tick = [&, live] {
    if (!*live) return;
    for (auto& node : nodes_) {
      if (!node->alive) continue;
      if (node->relay) (void)node->relay->poll();
      for (auto& kid : node->tree_kids) (void)kid->poll();
      if (!node->relay || topology_ == SimTopology::kBinaryTree) continue;
      // A sentinel's standby links: what it no longer hears reaches the producer two hops later
      // (control::Unheard; the producer's own at once), and the next move's detour avoids those
      // links both ways, as a round's does.
      std::vector<uint32_t> unheard = node->relay->unheard_watched();
      if (unheard != unheard_sent[node->id]) {
        unheard_sent[node->id] = unheard;
        net_.loop().after(node->id == kProducer ? Duration::zero() : 2 * net_.latency(),
                          [&, sentinel = node->id, unheard, live] {
                            if (*live) unheard_known[sentinel] = unheard;
                          });
      }
      for (uint32_t child : node->relay->unreachable_children()) {
        if (!reported.insert({node->id, child}).second) continue;
        net_.loop().after(2 * net_.latency(), [&, child, parent = node->id, live] {
          if (*live) move_child(parent, child);
        });
      }
      // A child heard on no rail for a little while: the producer moves it once the standby
      // links say the link between the two sites is cut, as a round does (control::Unreachable's
      // early report), looking again on every tick until the full report comes.
      for (uint32_t child : node->relay->unheard_children()) {
        if (!reported_early.insert({node->id, child}).second) continue;
        net_.loop().after(node->id == kProducer ? Duration::zero() : 2 * net_.latency(),
                          [&, child, parent = node->id, live] {
                            if (*live) early.insert({parent, child});
                          });
      }
    }
    // What the standby links say, as it comes in (RoundDriver::run's act_on_standby_links): early
    // reports across a link found cut become moves, and so does a node of a site moved in this
    // version whose parent's site is found cut from its own.
    if (early.empty() && tailed.empty()) return reschedule();
    const BrokenLinks cut = unheard_links(unheard_known, standby_now(), node_site_map(c_));
    if (cut.empty()) return reschedule();
    const auto is_cut = [&](uint32_t parent, uint32_t child) {
      return cut.count({site_name(parent), site_name(child)}) != 0;
    };
    for (auto it = early.begin(); it != early.end();) {
      const auto [parent, child] = *it;
      if (!feeds(parent, child) || reported.count({parent, child})) {
        it = early.erase(it);
      } else if (site_name(parent) != site_name(child) && is_cut(parent, child)) {
        reported.insert({parent, child});
        it = early.erase(it);
        move_child(parent, child);
      } else {
        ++it;
      }
    }
    std::set<std::string> moved_sites;  // a move takes the rest of the site along
    for (const auto& [child, times] : tailed) moved_sites.insert(site_name(child));
    std::vector<std::pair<uint32_t, uint32_t>> moved_on;
    for (uint32_t child = 1; child <= c_.nodes; ++child) {
      if (!moved_sites.count(site_name(child)) || !nodes_[child]->alive) continue;
      for (uint32_t parent : parent_nodes(child)) {
        if (site_name(parent) != site_name(child) && !reported.count({parent, child}) && is_cut(parent, child)) {
          moved_on.emplace_back(parent, child);
        }
      }
    }
    for (const auto& [parent, child] : moved_on) {
      reported.insert({parent, child});
      move_child(parent, child);
    }
    reschedule();
  };
  net_.loop().after(kPollEvery, tick);
  const TimePoint limit = t0 + span(20 * expected + 10 * faults.detect_seconds + 60);
  // ClusterSpec::extrapolate: the version may end once every living node holds a milestone at
  // which the pipeline is steady (steady_at), each node finishing at its extrapolated end.
  size_t checked = 0;  // milestones found not steady
  bool steady = false;
  const auto done_or_steady = [&] {
    if (everyone_done()) return true;
    while (checked < reached_.size() && reached_[checked] == alive_.size()) {
      if (steady_at(checked, t0, shape.slices())) return steady = true;
      ++checked;
    }
    return false;
  };
  result.events = net_.loop().run(done_or_steady, limit);
  DC_RETURN_IF_ERROR(replan_error);
  if (steady && !everyone_done()) {
    result.simulated_share = static_cast<double>(milestones_[checked]) / shape.slices();
    for (auto& node : nodes_) {
      if (!node->alive || node->id == kProducer || node->complete()) continue;
      node->have.assign(shape.slices(), 1);
      node->held = shape.slices();
      node->stripe_last.assign(stripes, t0 + span(node->extrapolated_end));
    }
    incomplete_ = 0;
  }
  result.survivors_complete = everyone_done();

  // Every GPU: its node's stripes pass through it in the node's order, cut-through, over the
  // node's own links; no sooner than the whole version could cross one such link.
  const double hop = slice_bytes / c_.intra_bytes_per_second + c_.intra_latency_seconds;
  std::vector<double> finished;
  for (uint32_t k = 0; k < c_.nodes; ++k) {
    const Node& node = *nodes_[k + 1];
    for (uint32_t g = 0; g < c_.gpus_per_node; ++g) {
      if (!node.alive) {
        result.consumer_seconds.push_back(-1);
        continue;
      }
      double done = since_start(node.first) + static_cast<double>(bytes) / c_.intra_bytes_per_second;
      for (uint32_t s = 0; s < stripes; ++s) {
        const auto& order = gpu_order[s][k + 1];
        const auto pos = static_cast<double>(std::find(order.begin(), order.end(), g) - order.begin());
        done = std::max(done, since_start(node.stripe_last[s]) + pos * hop);
      }
      if (!node.complete()) done = std::numeric_limits<double>::infinity();
      result.consumer_seconds.push_back(done);
      finished.push_back(done);
    }
  }
  for (uint32_t s = 0; s < c_.sites; ++s) {
    result.wan_copies.push_back(static_cast<double>(net_.wan_bytes_into(s) - wan_before[s]) / static_cast<double>(bytes));
  }
  std::sort(finished.begin(), finished.end());
  result.seconds = finished.empty() ? 0 : finished.back();
  result.median_seconds = finished.empty() ? 0 : finished[finished.size() / 2];
  finish_version(slice_bytes);
  // What each node's rails carried out in this version.
  for (const auto& node : nodes_) {
    uint64_t out = 0;
    if (node->relay) {
      for (uint32_t kid = 1; kid <= c_.nodes; ++kid) {
        for (const auto& rail : node->relay->telemetry(kid)) out += rail.bytes_acked;
      }
    }
    for (const auto& kid : node->tree_kids) {
      for (const auto& rail : kid->telemetry()) out += rail.bytes_acked;
    }
    const uint64_t carried = out - node->bytes_out_before;
    node->bytes_out_before = out;
    if (node->id == kProducer) {
      result.producer_bytes_out = carried;
    } else {
      result.max_node_bytes_out = std::max(result.max_node_bytes_out, carried);
    }
  }
  // Whatever this version left queued (a tick, faults not yet due) runs now as nothing, so that
  // the next version starts with an idle loop.
  *live = false;
  net_.loop().run([] { return false; });
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

// The round's link reports go to the rate book (node ids stand for members: a node's GPUs take
// the version over its rails together), and the relays stop forwarding.
void SimCluster::finish_version(uint32_t slice_bytes) {
  for (const auto& node : nodes_) {
    if (!node->alive || !node->relay) continue;
    for (const auto& [child, sample] : node->relay->child_links()) book_.record(node->id, child, sample, transfer_);
  }
  book_.close_round(slice_bytes);
  for (auto& node : nodes_) {
    if (node->relay) node->relay->end();
    for (auto& kid : node->tree_kids) kid->close();
  }
}

}  // namespace

uint32_t site_of_node(const ClusterSpec& c, uint32_t k) {
  return c.sites <= 1 ? 0 : static_cast<uint32_t>(static_cast<uint64_t>(k) * c.sites / c.nodes);
}

double wan_latency_seconds(const ClusterSpec& c, uint32_t site_a, uint32_t site_b) {
  // The links in a fixed order (0-1, 0-2, ..., 1-2, ...), their latencies evenly from min to max.
  const uint32_t a = std::min(site_a, site_b), b = std::max(site_a, site_b);
  const uint32_t links = c.sites * (c.sites - 1) / 2;
  const uint32_t index = a * c.sites - a * (a + 1) / 2 + (b - a - 1);
  const double step = links > 1 ? (c.wan_latency_max_seconds - c.wan_latency_min_seconds) / (links - 1) : 0;
  return c.wan_latency_min_seconds + step * index;
}

Result<SimResult> simulate_versions(const ClusterSpec& cluster, const std::vector<uint64_t>& versions,
                                    SimTopology topology, const FaultSpec& faults) {
  if (versions.empty()) return invalid_argument("no version to simulate");
  SimCluster sim(cluster, topology);
  DC_RETURN_IF_ERROR(sim.build());
  SimResult last;
  for (size_t v = 0; v < versions.size(); ++v) {
    const bool reported = v + 1 == versions.size();
    DC_ASSIGN_OR_RETURN(last, sim.run_version(versions[v], reported ? faults : FaultSpec{}, reported));
  }
  last.huge_page_bytes = memory_use().huge_page_bytes;  // while the cluster is still held
  return last;
}

}  // namespace deltacast::bench
