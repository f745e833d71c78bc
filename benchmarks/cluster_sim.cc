#include "cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "broadcast/engine/planner.h"
#include "broadcast/engine/rate_book.h"
#include "broadcast/engine/relay.h"
#include "broadcast/engine/round.h"
#include "broadcast/transport/sim/transport.h"

namespace deltacast::bench {

namespace {

using sim::Duration;
constexpr uint64_t kTransfer = 1;
constexpr uint32_t kProducer = 0;  // node id of the producer; rollout node k is id k + 1
constexpr Duration kPollEvery = std::chrono::milliseconds(1);

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
  sim::EventLoop* loop = nullptr;
  uint32_t stripes = 1;

  void arrived(uint32_t slice) {
    if (!alive || slice >= have.size() || have[slice]) return;
    if (held == 0) first = loop->now();
    have[slice] = 1;
    ++held;
    stripe_last[slice % stripes] = loop->now();
    if (relay) relay->on_slice(kTransfer, slice, 0);
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
// planner keeps a node's GPUs consecutive in every chain. `order[s][node]`: the node's GPUs in
// stripe s's order, as positions 0..gpus-1 of that node.
struct NodeChains {
  std::vector<std::vector<uint32_t>> chains;                     // node ids per stripe
  std::vector<std::map<uint32_t, std::vector<uint32_t>>> order;  // per stripe: node -> GPU positions
};

Result<NodeChains> deltacast_chains(const ClusterSpec& c, const std::vector<uint32_t>& alive_nodes, uint32_t stripes,
                                    const std::vector<uint32_t>& slow_nodes) {
  std::vector<uint32_t> members;
  NodeOf nodes;
  std::vector<uint32_t> slow;
  for (uint32_t k : alive_nodes) {
    for (uint32_t g = 0; g < c.gpus_per_node; ++g) {
      const uint32_t id = k * c.gpus_per_node + g + 1;
      members.push_back(id);
      nodes[id] = fmt::format("n{}", k);
      if (std::find(slow_nodes.begin(), slow_nodes.end(), k) != slow_nodes.end()) slow.push_back(id);
    }
  }
  const Plan plan = plan_chains(members, stripes, slow, nodes);
  NodeChains out;
  out.order.resize(plan.stripes());
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    std::vector<uint32_t> chain;
    for (uint32_t id : plan.chains[s]) {
      const uint32_t node = (id - 1) / c.gpus_per_node + 1;
      if (chain.empty() || chain.back() != node) {
        if (std::find(chain.begin(), chain.end(), node) != chain.end()) {
          return internal_error("stripe {}: the planner split node {}'s GPUs", s, node - 1);
        }
        chain.push_back(node);
      }
      out.order[s][node].push_back((id - 1) % c.gpus_per_node);
    }
    out.chains.push_back(std::move(chain));
  }
  return out;
}

// Who each node (the producer included) sends each stripe to.
std::map<uint32_t, std::vector<uint32_t>> children_of(const NodeChains& chains, uint32_t stripes) {
  std::map<uint32_t, std::vector<uint32_t>> children;
  for (uint32_t s = 0; s < chains.chains.size(); ++s) {
    uint32_t parent = kProducer;
    for (uint32_t node : chains.chains[s]) {
      auto& kids = children[parent];
      kids.resize(stripes, 0);
      kids[s] = node;
      parent = node;
    }
  }
  return children;
}

}  // namespace

std::string_view topology_name(SimTopology t) {
  switch (t) {
    case SimTopology::kDeltacast: return "deltacast";
    case SimTopology::kBinaryTree: return "binary-tree";
    case SimTopology::kRing: return "ring";
  }
  return "?";
}

double pipelined_bound(uint64_t bytes, uint32_t receivers, double bandwidth, double alpha) {
  const double a = std::sqrt(static_cast<double>(bytes) / bandwidth);
  const double b = std::sqrt(std::max<double>(0, receivers - 1.0) * alpha);
  return (a + b) * (a + b);
}

Result<SimResult> simulate_version(const ClusterSpec& c, uint64_t bytes, SimTopology topology, const FaultSpec& faults,
                                   const std::vector<uint32_t>& slow_nodes) {
  if (c.nodes == 0 || c.gpus_per_node == 0 || c.rails == 0) return invalid_argument("an empty cluster");
  if (bytes == 0) return invalid_argument("a version of 0 bytes");
  if (c.rail_bytes_per_second <= 0 || c.intra_bytes_per_second <= 0) return invalid_argument("rates must be positive");
  const auto wall_start = std::chrono::steady_clock::now();
  sim::SimNetwork net;
  auto transport = std::make_shared<sim::SimTransport>(&net);
  net.set_latency(span(c.latency_seconds));

  // Ports: every rail of every node (the producer is node 0), at the rail rate times the node's
  // factor, sharing the node's PCIe limit.
  const uint32_t total_nodes = c.nodes + 1;
  for (uint32_t n = 0; n < total_nodes; ++n) {
    const auto factor = n == kProducer ? c.rate_factor.end() : c.rate_factor.find(n - 1);
    const double rate = c.rail_bytes_per_second * (factor == c.rate_factor.end() ? 1.0 : factor->second);
    for (uint32_t r = 0; r < c.rails; ++r) {
      const std::string host = rail_host(n, r);
      net.set_port_rates(host, rate, rate);
      if (c.node_limit_bytes_per_second > 0) net.set_node(host, fmt::format("node{}", n));
    }
    if (c.node_limit_bytes_per_second > 0) net.set_node_limit(fmt::format("node{}", n), c.node_limit_bytes_per_second);
  }

  // The version's shape, as a round picks it: stripes, and the alpha-beta slice size for chains
  // through every consumer at the nodes' rate.
  const uint32_t consumers = c.nodes * c.gpus_per_node;
  const double node_rate = c.rail_bytes_per_second * c.rails;
  uint32_t stripes = topology != SimTopology::kDeltacast ? 1 : c.stripes != 0 ? c.stripes : default_stripes(consumers);
  const uint32_t slice_bytes =
      alpha_beta_slice_bytes(bytes / stripes, consumers, RoundOptions{}.alpha_seconds, node_rate);
  DC_ASSIGN_OR_RETURN(const TransferShape shape, TransferShape::make(kTransfer, bytes, slice_bytes));
  stripes = std::max<uint32_t>(1, std::min(stripes, shape.slices()));

  SprayOptions spray;
  spray.clock = &net.clock();
  spray.scheduler_thread = false;
  spray.slice_bytes = slice_bytes;
  const std::vector<uint64_t> source_checksums(shape.slices(), 0);
  std::vector<std::unique_ptr<Node>> nodes;
  std::map<uint32_t, PeerEndpoints> directory;
  for (uint32_t n = 0; n < total_nodes; ++n) {
    auto node = std::make_unique<Node>();
    node->id = n;
    node->loop = &net.loop();
    node->stripes = stripes;
    for (uint32_t r = 0; r < c.rails; ++r) node->local_rails.push_back(Endpoint{rail_host(n, r), 0});
    node->sink.node = node.get();
    node->have.assign(shape.slices(), n == kProducer ? 1 : 0);
    node->held = n == kProducer ? shape.slices() : 0;
    node->stripe_last.assign(stripes, TimePoint{});
    if (n != kProducer) {
      DC_ASSIGN_OR_RETURN(node->listener, transport->listen(node->local_rails, &node->sink, {}));
      directory[n] = node->listener->endpoints();
    }
    if (topology != SimTopology::kBinaryTree) {
      node->relay = std::make_unique<Relay>(RelayOptions{transport, node->local_rails, {}, spray});
      node->relay->begin(shape, version_bytes(), stripes, n == kProducer ? &source_checksums : nullptr);
    }
    nodes.push_back(std::move(node));
  }

  // Where each GPU sits in its node's order, per stripe (for the intra-node stage).
  std::vector<std::map<uint32_t, std::vector<uint32_t>>> gpu_order(stripes);
  std::vector<uint32_t> alive;
  for (uint32_t k = 0; k < c.nodes; ++k) alive.push_back(k);
  SimResult result;
  result.stripes = stripes;
  result.slice_bytes = slice_bytes;
  result.slices = shape.slices();

  // (Re-)plans the chains over the living nodes and tells every relay its children, with what
  // each node holds already, as a round's replan does.
  const auto plan = [&]() -> Status {
    NodeChains chains;
    if (topology == SimTopology::kDeltacast) {
      DC_ASSIGN_OR_RETURN(chains, deltacast_chains(c, alive, stripes, slow_nodes));
    } else {
      chains.chains.assign(1, {});
      chains.order.assign(1, {});
      for (uint32_t k : alive) {
        chains.chains[0].push_back(k + 1);
        for (uint32_t g = 0; g < c.gpus_per_node; ++g) chains.order[0][k + 1].push_back(g);
      }
    }
    for (uint32_t s = 0; s < stripes; ++s) gpu_order[s] = chains.order[std::min<size_t>(s, chains.order.size() - 1)];
    const auto children = children_of(chains, stripes);
    std::map<uint32_t, std::vector<bool>> have;
    for (const auto& node : nodes) {
      if (node->alive && node->id != kProducer) have[node->id] = std::vector<bool>(node->have.begin(), node->have.end());
    }
    for (const auto& node : nodes) {
      if (!node->alive) continue;
      auto kids = children.find(node->id);
      const std::vector<uint32_t> none(stripes, 0);
      DC_RETURN_IF_ERROR(node->relay->set_children(kids == children.end() ? none : kids->second, directory, have));
    }
    return Status();
  };

  if (topology == SimTopology::kBinaryTree) {
    // Node at heap position p (the producer feeds position 0) sends everything to 2p+1 and 2p+2.
    for (uint32_t n = 0; n < total_nodes; ++n) {
      std::vector<uint32_t> kids;
      if (n == kProducer) {
        kids = {1};
      } else {
        for (uint32_t k : {2 * (n - 1) + 1, 2 * (n - 1) + 2}) {
          if (k < c.nodes) kids.push_back(k + 1);
        }
      }
      for (uint32_t kid : kids) {
        std::vector<std::unique_ptr<Channel>> channels;
        for (uint32_t r = 0; r < c.rails; ++r) {
          RailSpec rail;
          rail.local = nodes[n]->local_rails[r];
          rail.remote = directory[kid][r];
          rail.name = fmt::format("{}-{}.r{}", n, kid, r);
          DC_ASSIGN_OR_RETURN(auto channel, transport->connect(rail, {}));
          channels.push_back(std::move(channel));
        }
        auto sprayer = std::make_unique<Sprayer>(std::move(channels), spray);
        DC_RETURN_IF_ERROR(sprayer->open(kTransfer, version_bytes(), bytes, slice_bytes).status());
        if (n == kProducer) sprayer->offer_all(source_checksums);
        nodes[n]->tree_kids.push_back(std::move(sprayer));
      }
    }
    for (uint32_t k = 0; k < c.nodes; ++k) {
      for (uint32_t g = 0; g < c.gpus_per_node; ++g) gpu_order[0][k + 1].push_back(g);
    }
  } else {
    DC_RETURN_IF_ERROR(plan());
  }

  // Faults: nodes that die at random times (noticed detect_seconds later, then re-planned
  // around), and rails that go down for a moment.
  std::mt19937_64 rng(faults.seed);
  const double expected = pipelined_bound(bytes, c.nodes, node_rate, c.latency_seconds);
  Status replan_error;
  if (faults.dead_fraction > 0) {
    if (topology == SimTopology::kBinaryTree) return invalid_argument("node deaths are simulated for chains only");
    const auto dying = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(faults.dead_fraction * c.nodes)));
    std::vector<uint32_t> order(c.nodes);
    for (uint32_t k = 0; k < c.nodes; ++k) order[k] = k;
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t i = 0; i < std::min(dying, c.nodes - 1); ++i) {
      const uint32_t k = order[i];
      const double when = std::uniform_real_distribution<double>(0.1, 0.9)(rng) * expected;
      net.loop().at(TimePoint{} + span(when), [&, k] {
        Node& node = *nodes[k + 1];
        node.alive = false;
        node.listener->close();
        node.relay->end();
        ++result.dead_nodes;
        net.loop().after(span(faults.detect_seconds), [&, k] {
          alive.erase(std::remove(alive.begin(), alive.end(), k), alive.end());
          ++result.replans;
          if (Status s = plan(); !s.ok()) replan_error = s;
        });
      });
    }
  }
  for (uint32_t i = 0; i < faults.flapping_rails; ++i) {
    const uint32_t k = static_cast<uint32_t>(rng() % c.nodes);
    const std::string host = rail_host(k + 1, static_cast<uint32_t>(rng() % c.rails));
    const double when = std::uniform_real_distribution<double>(0.05, 0.8)(rng) * expected;
    net.loop().at(TimePoint{} + span(when), [&net, host] { net.set_port_up(host, false); });
    net.loop().at(TimePoint{} + span(when + faults.flap_down_seconds), [&net, host] { net.set_port_up(host, true); });
  }

  // The sprayers have no threads: a tick polls them (deadlines, probes) every simulated
  // millisecond while the version is under way.
  const auto everyone_done = [&] {
    return std::all_of(nodes.begin(), nodes.end(), [](const auto& n) { return !n->alive || n->complete(); });
  };
  std::function<void()> tick = [&] {
    for (auto& node : nodes) {
      if (!node->alive) continue;
      if (node->relay) (void)node->relay->poll();
      for (auto& kid : node->tree_kids) (void)kid->poll();
    }
    if (!everyone_done()) net.loop().after(kPollEvery, tick);
  };
  net.loop().after(kPollEvery, tick);
  const TimePoint limit = TimePoint{} + span(20 * expected + 10 * faults.detect_seconds + 60);
  result.events = net.loop().run(everyone_done, limit);
  DC_RETURN_IF_ERROR(replan_error);
  result.survivors_complete = everyone_done();

  // Every GPU: its node's stripes pass through it in the node's order, cut-through, over the
  // node's own links; no sooner than the whole version could cross one such link.
  const double hop = slice_bytes / c.intra_bytes_per_second + c.intra_latency_seconds;
  std::vector<double> finished;
  for (uint32_t k = 0; k < c.nodes; ++k) {
    const Node& node = *nodes[k + 1];
    for (uint32_t g = 0; g < c.gpus_per_node; ++g) {
      if (!node.alive) {
        result.consumer_seconds.push_back(-1);
        continue;
      }
      double done = at_seconds(node.first) + static_cast<double>(bytes) / c.intra_bytes_per_second;
      for (uint32_t s = 0; s < stripes; ++s) {
        const auto& order = gpu_order[s][k + 1];
        const auto pos = static_cast<double>(std::find(order.begin(), order.end(), g) - order.begin());
        done = std::max(done, at_seconds(node.stripe_last[s]) + pos * hop);
      }
      if (!node.complete()) done = std::numeric_limits<double>::infinity();
      result.consumer_seconds.push_back(done);
      finished.push_back(done);
    }
  }
  std::sort(finished.begin(), finished.end());
  result.seconds = finished.empty() ? 0 : finished.back();
  result.median_seconds = finished.empty() ? 0 : finished[finished.size() / 2];

  // What each node's rails carried out.
  for (const auto& node : nodes) {
    uint64_t out = 0;
    if (node->relay) {
      for (uint32_t kid = 1; kid < total_nodes; ++kid) {
        for (const auto& rail : node->relay->telemetry(kid)) out += rail.bytes_acked;
      }
    }
    for (const auto& kid : node->tree_kids) {
      for (const auto& rail : kid->telemetry()) out += rail.bytes_acked;
    }
    if (node->id == kProducer) {
      result.producer_bytes_out = out;
    } else {
      result.max_node_bytes_out = std::max(result.max_node_bytes_out, out);
    }
  }
  // The round's link reports into the rate book, which judges who is slow (node ids stand for
  // members: a node's GPUs take the version over its rails together).
  if (topology == SimTopology::kDeltacast) {
    RateBook book;
    std::vector<uint32_t> members;
    for (const auto& node : nodes) {
      if (!node->alive) continue;
      if (node->id != kProducer) members.push_back(node->id);
      for (const auto& [child, sample] : node->relay->child_links()) book.record(node->id, child, sample);
    }
    book.close_round();
    for (uint32_t id : book.judge(members).slow) result.judged_slow.push_back(id - 1);
  }
  for (auto& node : nodes) {
    if (node->relay) node->relay->end();
    for (auto& kid : node->tree_kids) kid->close();
  }
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace deltacast::bench
