// deltacast-bench simulate: versions broadcast to simulated clusters of up to
// thousands of GPUs by the real planner, relays and sprayers
// (cluster_sim.h), against the pipelined-broadcast bound and two baselines
// run by the same simulator (a binary tree of nodes, one ring through every
// node). For every consumer count: a dense version and a sparse one, fault
// free; then, for deltacast, the same with nodes dying mid-version and rails
// flapping (--dead-fraction, --flapping-rails), and with slow nodes
// (--slow-nodes, placed at the chains' tails as the rate book would).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/engine/plan/planner.h"
#include "cli/bench_commands.h"
#include "simulate/cluster_sim.h"
#include "simulate/huge_pages.h"
#include "cli/plot.h"

namespace deltacast::bench {

namespace {

using Json = nlohmann::json;

struct SimulateArgs {
  std::vector<uint32_t> consumers{64, 1024};
  uint32_t gpus_per_node = 8;
  uint32_t rails = 8;
  double rail_gbit = 400;
  double latency_us = 5;
  double node_limit_gbyte = 0;
  double intra_gbyte = 450;
  uint32_t stripes = 0;
  uint32_t fanout = 0;          // deltacast's shape (0: the planner's choice per version)
  bool shapes = false;          // also every fixed shape the planner builds, as baselines
  double slice_alpha_us = 0;
  double slice_cost_us = 10;
  double gbytes = 140;
  double warmup_gbytes = 8;
  double density = 0.02;
  std::vector<double> sizes_gbytes;  // versions of these sizes instead of the dense and sparse ones
  std::vector<std::string> versions{"dense", "sparse"};  // which of the two versions to simulate
  double dead_fraction = 0.01;
  double detect_seconds = 0;
  bool silent_deaths = false;
  uint32_t flapping_rails = 0;
  uint32_t slow_nodes = 1;
  double slow_factor = 0.1;
  uint32_t sites = 1;               // the nodes in this many sites joined by WAN links
  double wan_gbit = 100;
  std::vector<double> wan_latency_ms{20, 80};  // the WAN links' latencies, spread from the first to the second
  bool baselines = true;
  bool extrapolate = false;  // versions without faults: simulated to a steady pipeline, then extrapolated
  uint64_t seed = 1;
  uint32_t jobs = std::max(1u, std::thread::hardware_concurrency());
  bool json = false;
  bool per_consumer = false;  // every consumer's time in the JSON
  std::string plot;           // PNG to draw (plot_simulate.py)
};

Json result_json(const SimResult& r, bool per_consumer) {
  Json j = {{"seconds", r.seconds},
          {"median_seconds", r.median_seconds},
          {"survivors_complete", r.survivors_complete},
          {"stripes", r.stripes},
          {"fanout", r.fanout},
          {"slice_bytes", r.slice_bytes},
          {"dead_nodes", r.dead_nodes},
          {"replans", r.replans},
          {"events", r.events},
          {"wall_seconds", r.wall_seconds},
          {"huge_page_bytes", r.huge_page_bytes},
          {"simulated_share", r.simulated_share},
          {"producer_bytes_out", r.producer_bytes_out},
          {"max_node_bytes_out", r.max_node_bytes_out}};
  if (per_consumer) {
    Json times = Json::array();  // a dead node's consumers: null
    for (double t : r.consumer_seconds) times.push_back(t >= 0 && std::isfinite(t) ? Json(t) : Json(nullptr));
    j["consumer_seconds"] = std::move(times);
  }
  return j;
}

// `learn_bytes`: the first version, a full one, which every scenario's cluster runs first (the
// sprayers measure the rails, the rate book the nodes); the one reported comes second.
Result<Json> scenario(const SimulateArgs& a, uint32_t consumers, const char* kind, uint64_t bytes, uint64_t learn_bytes) {
  ClusterSpec c;
  c.gpus_per_node = std::min(a.gpus_per_node, consumers);
  c.nodes = (consumers + c.gpus_per_node - 1) / c.gpus_per_node;
  c.rails = a.rails;
  c.rail_bytes_per_second = a.rail_gbit * 1e9 / 8;
  c.latency_seconds = a.latency_us * 1e-6;
  c.node_limit_bytes_per_second = a.node_limit_gbyte * 1e9;
  c.intra_bytes_per_second = a.intra_gbyte * 1e9;
  c.stripes = a.stripes;
  c.fanout = a.fanout;
  c.slice_alpha_seconds = a.slice_alpha_us * 1e-6;
  c.slice_cost_seconds = a.slice_cost_us * 1e-6;
  c.sites = a.sites;
  c.wan_bytes_per_second = a.wan_gbit * 1e9 / 8;
  c.wan_latency_min_seconds = a.wan_latency_ms.front() * 1e-3;
  c.wan_latency_max_seconds = a.wan_latency_ms.back() * 1e-3;
  c.extrapolate = a.extrapolate;
  Json row = {{"scenario", fmt::format("{} consumers, {}", consumers, kind)},
              {"consumers", c.nodes * c.gpus_per_node},
              {"nodes", c.nodes},
              {"bytes", bytes},
              {"kind", kind}};
  // Every scenario's cluster is warmed up by a first (full) version, as a producer's first round
  // (none: the version is the cluster's first, sent by cold sprayers with no rate book).
  const std::vector<uint64_t> versions =
      learn_bytes > 0 ? std::vector<uint64_t>{learn_bytes, bytes} : std::vector<uint64_t>{bytes};
  // The simulations of a row are independent clusters: they run side by side, --jobs at a time.
  struct Run {
    std::string name;
    std::function<Result<SimResult>()> simulate;
  };
  std::vector<Run> runs;
  runs.reserve(5);
  runs.push_back({"deltacast", [&] { return simulate_versions(c, versions, SimTopology::kDeltacast, FaultSpec{}); }});
  // Each fixed shape the planner builds (chains, trees 2, 4, 8 wide), for the best of them as a
  // baseline; the stripes each takes are the planner's for it.
  std::vector<ClusterSpec> fixed;
  if (a.shapes) {
    for (uint32_t k : kFanouts) {
      if (k > 1 && k >= c.nodes) continue;
      fixed.push_back(c);
      fixed.back().fanout = k;
    }
  }
  for (const ClusterSpec& shape : fixed) {
    runs.push_back({fmt::format("fanout {}", shape.fanout),
                    [&] { return simulate_versions(shape, versions, SimTopology::kDeltacast, FaultSpec{}); }});
  }
  if (a.baselines) {
    runs.push_back({"tree", [&] { return simulate_versions(c, versions, SimTopology::kBinaryTree, FaultSpec{}); }});
    runs.push_back({"ring", [&] { return simulate_versions(c, versions, SimTopology::kRing, FaultSpec{}); }});
  }
  FaultSpec f;
  f.dead_fraction = a.dead_fraction;
  f.detect_seconds = a.detect_seconds;
  f.silent = a.silent_deaths;
  f.flapping_rails = a.flapping_rails;
  f.seed = a.seed;
  if (a.dead_fraction > 0 || a.flapping_rails > 0) {
    runs.push_back({"faults", [&] { return simulate_versions(c, versions, SimTopology::kDeltacast, f); }});
  }
  // Sites: the last site's WAN links fail mid-version but its link to site 1.
  FaultSpec cut;
  cut.cut_wan_site = c.sites - 1;
  cut.cut_wan_keep = 1;
  if (c.sites > 2) {
    runs.push_back({"wan_cut", [&] { return simulate_versions(c, versions, SimTopology::kDeltacast, cut); }});
  }
  // Slow nodes in the middle of the node order: the first version finds them (the rate book
  // judges the relays' link reports), the one reported has them at the chains' tails.
  ClusterSpec slow = c;
  for (uint32_t i = 0; i < a.slow_nodes; ++i) slow.rate_factor[c.nodes / 2 + i] = a.slow_factor;
  if (a.slow_nodes > 0 && c.nodes > a.slow_nodes) {
    runs.push_back({"slow", [&] { return simulate_versions(slow, versions, SimTopology::kDeltacast, FaultSpec{}); }});
  }
  std::map<std::string, SimResult> done;
  const size_t jobs = std::max<uint32_t>(1, a.jobs);
  for (size_t first = 0; first < runs.size(); first += jobs) {
    std::vector<std::pair<std::string, std::future<Result<SimResult>>>> batch;
    for (size_t i = first; i < std::min(runs.size(), first + jobs); ++i) {
      batch.emplace_back(runs[i].name, std::async(std::launch::async, runs[i].simulate));
    }
    Status failed;
    for (auto& [name, future] : batch) {
      auto r = future.get();  // every run of the batch ends before anything returns
      if (!r.ok()) {
        if (failed.ok()) failed = r.status();
        continue;
      }
      done[name] = std::move(r).value();
    }
    DC_RETURN_IF_ERROR(failed);
  }
  const SimResult& clean = done.at("deltacast");
  row["bound_seconds"] = clean.bound_seconds;
  row["chain_bound_seconds"] = clean.chain_bound_seconds;
  row["seconds"] = clean.seconds;
  row["fanout"] = clean.fanout;
  row["ratio_to_bound"] = clean.seconds / clean.bound_seconds;
  if (!fixed.empty()) {
    Json shapes = Json::object();
    double best = std::numeric_limits<double>::infinity();
    uint32_t best_fanout = 0;
    for (const ClusterSpec& shape : fixed) {
      const SimResult& r = done.at(fmt::format("fanout {}", shape.fanout));
      shapes[std::to_string(shape.fanout)] = r.seconds;
      if (r.seconds < best) {
        best = r.seconds;
        best_fanout = shape.fanout;
      }
    }
    row["fixed_shapes_seconds"] = shapes;
    row["best_fixed_fanout"] = best_fanout;
    row["vs_best_fixed"] = clean.seconds / best;
  }
  row["survivors_complete"] = clean.survivors_complete;
  row["deltacast"] = result_json(clean, a.per_consumer);
  if (done.count("tree")) {
    row["binary_tree_seconds"] = done.at("tree").seconds;
    row["ring_seconds"] = done.at("ring").seconds;
  }
  if (done.count("faults")) {
    const SimResult& faulty = done.at("faults");
    row["faults"] = result_json(faulty, a.per_consumer);
    row["faults"]["vs_fault_free"] = faulty.seconds / clean.seconds;
    row["survivors_complete"] = clean.survivors_complete && faulty.survivors_complete;
  }
  if (c.sites > 1) {
    // Each remote site's WAN bytes over the version's; a cut link's cost against the version's
    // time over a detour (its bytes over one WAN link and the two longest links' latencies).
    row["sites"] = c.sites;
    row["wan_copies"] = std::vector<double>(clean.wan_copies.begin() + 1, clean.wan_copies.end());
  }
  if (done.count("wan_cut")) {
    const SimResult& r = done.at("wan_cut");
    row["wan_cut"] = result_json(r, a.per_consumer);
    row["wan_cut"]["site"] = cut.cut_wan_site;
    row["wan_cut"]["extra_seconds"] = r.seconds - clean.seconds;
    row["wan_cut"]["detour_seconds"] = static_cast<double>(bytes) / c.wan_bytes_per_second + 2 * c.wan_latency_max_seconds;
    row["survivors_complete"] = row["survivors_complete"].get<bool>() && r.survivors_complete;
  }
  if (done.count("slow")) {
    const SimResult& r = done.at("slow");
    row["slow"] = result_json(r, a.per_consumer);
    row["slow"]["slow_nodes"] = r.slow_nodes;
    row["slow"]["median_vs_fault_free"] = r.median_seconds / clean.median_seconds;
  }
  return row;
}

int run(const SimulateArgs& a) {
  Json rows = Json::array();
  const uint64_t dense = static_cast<uint64_t>(a.gbytes * 1e9);
  // The versions of each row: the dense and the sparse one, or --sizes-gbytes.
  std::vector<std::pair<std::string, uint64_t>> kinds;
  if (a.sizes_gbytes.empty()) {
    for (const auto& [kind, bytes] : {std::pair<std::string, uint64_t>{"dense", dense},
                                      {"sparse", static_cast<uint64_t>(a.density * static_cast<double>(dense))}}) {
      if (bytes != 0 && std::find(a.versions.begin(), a.versions.end(), kind) != a.versions.end()) {
        kinds.emplace_back(kind, bytes);
      }
    }
  } else {
    for (double gbytes : a.sizes_gbytes) kinds.emplace_back(fmt::format("{:g} GB", gbytes), static_cast<uint64_t>(gbytes * 1e9));
  }
  for (uint32_t n : a.consumers) {
    for (const auto& [kind, bytes] : kinds) {
      auto row = scenario(a, n, kind.c_str(), bytes, std::min(dense, static_cast<uint64_t>(a.warmup_gbytes * 1e9)));
      if (!row.ok()) {
        fmt::print(stderr, "deltacast-bench simulate: {}\n", row.status().to_string());
        return 1;
      }
      if (!a.json) {
        const Json& r = *row;
        fmt::print("{:>5} consumers {:<6} fan-out {} {:>10.4f} s  bound {:>9.4f} s  x{:<6.3f}", n, kind,
                   r["fanout"].get<uint32_t>(), r["seconds"].get<double>(), r["bound_seconds"].get<double>(),
                   r["ratio_to_bound"].get<double>());
        if (r.contains("vs_best_fixed")) {
          fmt::print("  best fixed: fan-out {} x{:.3f}", r["best_fixed_fanout"].get<uint32_t>(),
                     r["vs_best_fixed"].get<double>());
        }
        if (r.contains("binary_tree_seconds")) {
          fmt::print("  tree {:>9.4f} s  ring {:>9.4f} s", r["binary_tree_seconds"].get<double>(),
                     r["ring_seconds"].get<double>());
        }
        if (r.contains("faults")) {
          fmt::print("  faults x{:.3f} ({} dead)", r["faults"]["vs_fault_free"].get<double>(),
                     r["faults"]["dead_nodes"].get<uint32_t>());
        }
        if (r.contains("slow")) fmt::print("  slow: median x{:.3f}", r["slow"]["median_vs_fault_free"].get<double>());
        if (r.contains("wan_copies")) {
          const auto copies = r["wan_copies"].get<std::vector<double>>();
          fmt::print("  WAN copies per site max {:.3f}", *std::max_element(copies.begin(), copies.end()));
        }
        if (r.contains("wan_cut")) {
          fmt::print("; site {} cut off: +{:.4f} s (detour {:.4f} s)", r["wan_cut"]["site"].get<uint32_t>(),
                     r["wan_cut"]["extra_seconds"].get<double>(), r["wan_cut"]["detour_seconds"].get<double>());
        }
        fmt::print("  [{:.1f} s wall]\n", r["deltacast"]["wall_seconds"].get<double>());
      }
      rows.push_back(std::move(row).value());
    }
  }
  // The most in huge pages as a simulation of deltacast ended (its cluster still held).
  uint64_t huge_page_bytes = 0;
  for (const Json& row : rows) {
    huge_page_bytes = std::max(huge_page_bytes, row["deltacast"]["huge_page_bytes"].get<uint64_t>());
  }
  const uint64_t peak = memory_use().peak_resident_bytes;
  const Json report{{"scenarios", rows},
                    {"memory",
                     {{"huge_pages_asked", heap_asks_for_huge_pages()},
                      {"peak_resident_bytes", peak},
                      {"huge_page_bytes", huge_page_bytes}}}};
  if (a.json) {
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print("memory: {:.2f} GB at most; {:.2f} GB in huge pages as a simulation ended{}\n", peak / 1e9,
               huge_page_bytes / 1e9,
               heap_asks_for_huge_pages() ? "" : " (not asked for: --jobs 1 asks, where the kernel has them)");
  }
  if (!a.plot.empty()) {
    if (Status s = draw_plot(a.sizes_gbytes.empty() ? "plot_simulate.py" : "plot_shapes.py", report, a.plot); !s.ok()) {
      fmt::print(stderr, "deltacast-bench simulate: --plot: {}\n", s.to_string());
      return 1;
    }
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "A version to a simulated cluster through the real planner, relays and sprayers, against the bound");
  cmd->add_option("--consumers", a->consumers, "Consumer GPU counts to simulate")->capture_default_str();
  cmd->add_option("--gpus-per-node", a->gpus_per_node, "GPUs (consumers) per node")->capture_default_str();
  cmd->add_option("--rails", a->rails, "NICs per node")->capture_default_str()->check(CLI::Range(1, 16));
  cmd->add_option("--rail-gbit", a->rail_gbit, "Rate of each rail, Gbit/s each way")->capture_default_str();
  cmd->add_option("--latency-us", a->latency_us, "One network hop, microseconds")->capture_default_str();
  cmd->add_option("--node-limit-gbyte", a->node_limit_gbyte, "A node's PCIe limit across its rails, GB/s (0: none)")
      ->capture_default_str();
  cmd->add_option("--intra-gbyte", a->intra_gbyte, "GPU to GPU inside a node, GB/s each way")->capture_default_str();
  cmd->add_option("--stripes", a->stripes, "deltacast's stripes (0: the planner's choice for the shape)")
      ->capture_default_str();
  cmd->add_option("--fanout", a->fanout,
                  "deltacast's shape: 1 chains, 2/4/8 trees that wide (0: the planner's choice per version)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1, 2, 4, 8}));
  cmd->add_flag("--shapes", a->shapes, "Also simulate every fixed shape (chains, trees 2, 4, 8 wide) as baselines");
  cmd->add_option("--slice-cost-us", a->slice_cost_us,
                  "What a port spends on each slice besides its bytes, microseconds (posting, completion, the "
                  "relay's turn)")
      ->capture_default_str();
  cmd->add_option("--slice-alpha-us", a->slice_alpha_us,
                  "Per-slice cost the slice size is chosen with, microseconds (0: --slice-cost-us, or the rounds' "
                  "default where that is 0)")
      ->capture_default_str();
  cmd->add_option("--gbytes", a->gbytes, "The dense version, GB")->capture_default_str();
  cmd->add_option("--warmup-gbytes", a->warmup_gbytes,
                  "The full version every scenario runs first (rails and nodes measured), GB; at most --gbytes (0: none, the version is the cluster's first)")
      ->capture_default_str();
  cmd->add_option("--density", a->density, "The sparse version's share of the dense bytes")->capture_default_str();
  cmd->add_option("--sizes-gbytes", a->sizes_gbytes,
                  "Versions of these sizes, GB, instead of the dense and sparse ones (with --shapes and --plot: time "
                  "against size per shape)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--versions", a->versions, "Which versions to simulate")
      ->capture_default_str()
      ->check(CLI::IsMember({"dense", "sparse"}));
  cmd->add_option("--dead-fraction", a->dead_fraction, "Nodes dying mid-version (0: none)")->capture_default_str();
  cmd->add_option("--detect-seconds", a->detect_seconds,
                  "Until the producer notices a death (0: two hops for killed processes, whose connections reset; "
                  "the control link's 1.5 s for silent ones)")
      ->capture_default_str();
  cmd->add_flag("--silent-deaths", a->silent_deaths,
                "Dying nodes hang instead (ports silent, connections open): their parents report them once they "
                "heard nothing of them for 300 ms");
  cmd->add_option("--flapping-rails", a->flapping_rails, "Rails going down and up mid-version")->capture_default_str();
  cmd->add_option("--slow-nodes", a->slow_nodes, "Slow nodes (0: none)")->capture_default_str();
  cmd->add_option("--slow-factor", a->slow_factor, "Their rails' rate factor")->capture_default_str();
  cmd->add_option("--sites", a->sites, "Sites the nodes are split into (the producer in the first), joined by WAN links")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--wan-gbit", a->wan_gbit, "Each WAN link's rate, Gbit/s each way")->capture_default_str();
  cmd->add_option("--wan-latency-ms", a->wan_latency_ms, "The WAN links' latencies, spread from the first to the second")
      ->expected(1, 2)
      ->capture_default_str();
  cmd->add_flag("!--no-baselines", a->baselines, "Skip the binary tree and ring baselines");
  cmd->add_flag("--extrapolate", a->extrapolate,
                "Simulate each version without faults until every node takes slices at a steady rate, then finish it "
                "at those rates (the largest versions to the most GPUs; their share simulated is in the JSON)");
  cmd->add_option("--jobs", a->jobs, "Simulations run side by side (one core each)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Fault seed")->capture_default_str();
  cmd->add_flag("--json", a->json, "JSON output");
  cmd->add_flag("--per-consumer", a->per_consumer, "With --json: every consumer's time");
  cmd->add_option("--plot", a->plot, "Draw time vs consumers and the spread of completion times into this PNG");
  cmd->callback([a] {
    if (a->jobs == 1) rerun_with_huge_pages();  // before the simulations' threads start
    if (!a->plot.empty()) a->per_consumer = true;
    throw CLI::RuntimeError(run(*a));
  });
}

}  // namespace deltacast::bench
