// The two sides of deltacast-bench sync, each usable as its own process:
// the producer (an RL-like trace published version by version, driven by
// commands on stdin or by the version loop) and the consumer (joins, commits
// every version, reports what it holds as JSON lines). The orchestrating
// mode (sync_bench.cc) runs the producer in-process and consumers as
// children of this same executable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_util.h"
#include "sync/device_tensors.h"
#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "broadcast/engine/producer.h"
#include "sparse/trace/rl_trace.h"
#include "cli/trust_options.h"

namespace deltacast::bench {

class GlooBaseline;

struct SyncArgs {
  std::string role = "both";
  int consumers = 4;
  int rails = 2;
  std::string transport = "tcp";            // tcp, rdma or auto
  uint64_t elements = 1ull << 26;
  int versions = 5;
  double lr = 3e-7;
  uint64_t seed = 1;
  std::string value_codec = "ulp";
  int zstd = 0;
  int wan_zstd = 1;
  unsigned threads = 0;
  bool dense = true;
  std::string gloo = "auto";
  bool netns = false;
  std::string rail_rate = "1gbit";
  std::string listen;                       // producer role: control address
  std::vector<std::string> connect;         // consumer role: producer address(es)
  std::vector<std::string> rail_addresses;  // either role: this side's address per rail
  TrustArgs trust;  // --token (default 0xdc5eed) and --protection (cli/trust_options.h)
  std::string name;
  std::string node;  // role consumer: the host it counts as (empty: the host name)
  std::string site;  // roles producer/consumer: the site it runs in (empty: the producer's)
  int producers = 1;                        // trainer ranks (sync_group.h); above 1: a sharded trainer
  std::vector<std::string> consumer_layouts;  // rollout layouts, "tp2,tp2,tp1" (sync_group.h)
  std::string layout;                       // role group-consumer: "tpN:r"
  std::vector<std::string> ranks;           // role group-consumer: each trainer rank's control address
  std::string coordinator;                  // roles group-*: the group coordinator's address (rank 0 hosts it)
  bool coordinator_elsewhere = false;       // role group-producer: rank 0 registers with it like every rank
  int rank = 0;                             // role group-producer: which trainer rank
  bool commands = false;                    // producer role: take commands on stdin
  bool hash_commits = false;                // consumer role: each committed event carries the model's hash
  bool die_with_parent = false;
  double timeout_seconds = 600;
  double round_timeout_seconds = 0;  // role producer: a round's limit (0: the engine's, 30 s + bytes at 10 MB/s)
  std::string shape = "auto";        // producers: the plan's shape (parse_shape: auto, chains, trees:K)
  bool json = false;
  int metrics_port = -1;  // roles producer/consumer: serve Prometheus metrics on this port (-1: none)
  std::string plot;       // the whole run: draw its report into this PNG (plot_sync.py)
  std::string device = "cpu";  // where every role's tensors live: "cpu" or "cuda" (GPU 0)
};

// Every role derives the same model from --elements: the trace's transformer layout in bf16.
Result<Manifest> sync_manifest(uint64_t elements);

// A rollout process's resident weights: host tensors for `specs`, every page touched (its inference
// server loaded them), so that the first version's commit measures copying, not page faults.
struct ResidentTensors {
  std::vector<AlignedBuffer> storage;
  std::vector<TensorView> views;

  ResidentTensors(const std::vector<TensorSpec>& specs, ThreadPool& pool);
};

// A JSON line on stdout, whole even when several threads emit (the roles' reports).
void emit(const nlohmann::json& event);
// SIGTERM and SIGINT ask a role's loop to end (stop_requested()) instead of killing it.
void stop_on_signals();
bool stop_requested();
Result<std::vector<Endpoint>> parse_endpoints(const std::vector<std::string>& texts);

// One published version, as the benchmark reports it.
struct VersionRow {
  uint64_t version = 0;
  bool full = false;
  VersionReport report;
  std::optional<bool> exact;
  std::optional<double> dense_seconds;
  std::optional<bool> dense_exact;
  std::optional<double> gloo_seconds;
  std::optional<bool> gloo_exact;
  std::optional<double> lower_bound_seconds;

  nlohmann::json to_json() const;
};

// The trainer side: trace + producer.
class SyncProducer {
 public:
  static Result<std::unique_ptr<SyncProducer>> create(const SyncArgs& args, Endpoint listen,
                                                      std::vector<Endpoint> rails, std::string netns);
  Producer& producer() { return *producer_; }
  RlTrace& trace() { return *trace_; }

  // Optionally steps the trace, publishes, waits for every member, optionally checks bit-exactness.
  Result<VersionRow> publish(bool full, bool step, bool check, Millis timeout);
  // While publish() waits, called about every 250 ms with how far the version's round is.
  void on_progress(std::function<void(const RoundProgress&)> callback) { on_progress_ = std::move(callback); }

 private:
  Status wait(uint64_t version, Millis timeout);

  std::unique_ptr<RlTrace> trace_;
  std::unique_ptr<DeviceTensors> gpu_;  // --device cuda: the trainer's tensors, the trace copied in
  std::unique_ptr<Producer> producer_;
  std::function<void(const RoundProgress&)> on_progress_;
};

struct SyncRun {
  std::string transport;  // the data transport in use
  std::vector<VersionRow> rows;
  double link_rate = 0;  // bytes/s one consumer received at in the fastest full round
  std::vector<VersionRow> dense_rows;  // the dense-sync baselines, in order
};

// The version loop: the initial full sync, then for each of args.versions steps a sparse
// version and, on the same tensors, the dense and gloo baselines. Every
// row's lower_bound_seconds is its wire bytes at the measured link rate.
Result<SyncRun> run_versions(SyncProducer& sync, const SyncArgs& args, GlooBaseline* gloo, Progress& progress);

nlohmann::json sync_report_json(const SyncArgs& args, const SyncRun& run, const std::string& gloo_note);
void print_sync_table(const nlohmann::json& report);

int run_consumer_role(const SyncArgs& args);
int run_producer_role(const SyncArgs& args);

}  // namespace deltacast::bench
