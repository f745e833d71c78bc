// deltacast-bench sync: the main job. A producer publishes versions of the
// RL-like trace to N consumer processes on this machine (loopback rails by
// default; with --netns every process sits in its own network namespace,
// joined by switched, shaped rails) and reports per version what moved, how
// long each stage took and whether every consumer is bit-exact, next to the
// baselines measured on the same tensors in the same run: a dense sync
// through deltacast and a torch.distributed gloo broadcast.
// --role producer / --role consumer run one side alone (sync_roles.h).
#include <future>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/bench_commands.h"
#include "cli/child_process.h"
#include "sync/gloo_baseline.h"
#include "cli/plot.h"
#include "sync/sync_group.h"
#include "cli/bench_util.h"
#include "cli/trust_options.h"
#include "sync/sync_roles.h"
#include "testbed/netns_testbed.h"

namespace deltacast::bench {

namespace {

std::string host_name(int consumer) { return fmt::format("c{}", consumer); }

int run_sync_both(const SyncArgs& args) {
  Progress progress(true);
  std::unique_ptr<NetnsTestbed> testbed;
  if (args.netns) {
    std::vector<std::string> hosts = {"p"};
    for (int i = 0; i < args.consumers; ++i) hosts.push_back(host_name(i));
    std::vector<TestbedPlane> planes(static_cast<size_t>(args.rails), TestbedPlane{args.rail_rate});
    progress.update(fmt::format("building {} namespaces joined by {} switched rails at {}", hosts.size(), args.rails,
                                args.rail_rate));
    auto made = NetnsTestbed::create(hosts, {}, planes);
    if (!made.ok()) return command_failed("sync", made.status());
    testbed = std::move(made).value();
  }
  // Where everyone is: rail r of the producer and of consumer i.
  const auto address = [&](size_t rail, int who) -> std::string {  // who: -1 producer, else a consumer
    if (testbed) return testbed->plane_address(rail, who < 0 ? "p" : host_name(who)).host;
    return fmt::format("127.{}.0.{}", rail + 1, who + 2);
  };
  std::vector<Endpoint> producer_rails;
  for (int r = 0; r < args.rails; ++r) producer_rails.push_back(Endpoint{address(static_cast<size_t>(r), -1), 0});
  const Endpoint control{testbed ? address(0, -1) : "127.0.0.1", 0};

  progress.update(fmt::format("preparing the trace: {} bf16 elements", args.elements));
  auto sync = SyncProducer::create(args, control, producer_rails, testbed ? testbed->netns("p") : "");
  if (!sync.ok()) return command_failed("sync", sync.status());
  Producer& producer = (*sync)->producer();

  // The gloo ranks start (Python imports take a while) while the consumers join.
  std::string gloo_note = "off";
  std::future<Result<std::unique_ptr<GlooBaseline>>> gloo_start;
  if (args.gloo != "off" && testbed) {
    gloo_note = "not run with --netns (its ranks would talk over unshaped loopback)";
  } else if (args.gloo != "off" && args.device == "cuda") {
    gloo_note = "not run with --device cuda (it broadcasts host tensors)";
  } else if (args.gloo != "off") {
    gloo_start = std::async(std::launch::async, [&] {
      return GlooBaseline::start((*sync)->trace().manifest(), args.consumers);
    });
  }

  const std::string self = executable_dir() + "/deltacast-bench";
  std::vector<std::unique_ptr<ChildProcess>> consumers;
  for (int i = 0; i < args.consumers; ++i) {
    std::vector<std::string> argv;
    if (testbed) argv = {"ip", "netns", "exec", testbed->netns(host_name(i))};
    for (const std::string& a : {self, std::string("sync"), std::string("--role"), std::string("consumer"),
                                 std::string("--connect"), producer.address().to_string(), std::string("--elements"),
                                 std::to_string(args.elements), std::string("--name"), host_name(i), std::string("--transport"),
                                 std::string(producer.transport()), std::string("--device"), args.device,
                                 std::string("--die-with-parent")}) {
      argv.push_back(a);
    }
    for (const std::string& a : args.trust.command_line()) argv.push_back(a);
    for (int r = 0; r < args.rails; ++r) {
      argv.push_back("--rail");
      argv.push_back(address(static_cast<size_t>(r), i));
    }
    if (args.metrics_port >= 0) {
      argv.push_back("--metrics-port");
      argv.push_back(std::to_string(args.metrics_port + 1 + i));
    }
    auto child = ChildProcess::spawn(argv, false, [&progress, i](const std::string& line) {
      if (line.find("\"error\"") != std::string::npos || line.find("\"refused\"") != std::string::npos) {
        progress.update(fmt::format("consumer {}: {}", i, line));
      }
    });
    if (!child.ok()) return command_failed("sync", child.status());
    consumers.push_back(std::move(child).value());
  }
  progress.update(fmt::format("waiting for {} consumers to join {}", args.consumers, producer.address().to_string()));
  if (Status s = producer.wait_members(static_cast<size_t>(args.consumers), Millis(120000)); !s.ok()) return command_failed("sync", s);

  std::unique_ptr<GlooBaseline> gloo;
  if (gloo_start.valid()) {
    progress.update("waiting for the gloo baseline's ranks");
    auto started = gloo_start.get();
    if (started.ok()) {
      gloo = std::move(started).value();
      gloo_note = fmt::format("torch.distributed gloo, {} receivers ({})", args.consumers, gloo->python());
    } else if (args.gloo == "on") {
      return command_failed("sync", started.status());
    } else {
      gloo_note = "unavailable: " + started.status().message();
    }
  }

  auto run = run_versions(**sync, args, gloo.get(), progress);
  progress.finish();
  gloo.reset();
  for (auto& c : consumers) c->terminate();
  producer.close();
  if (!run.ok()) return command_failed("sync", run.status());
  const auto report = sync_report_json(args, *run, gloo_note);
  if (args.json) {
    fmt::print("{}\n", report.dump());
  } else {
    print_sync_table(report);
  }
  if (!args.plot.empty()) {
    if (Status s = draw_plot("plot_sync.py", report, args.plot); !s.ok()) {
      fmt::print(stderr, "deltacast-bench sync: --plot: {}\n", s.to_string());
      return 1;
    }
  }
  return report["all_exact"].get<bool>() ? 0 : 1;
}

}  // namespace

void add_sync_command(CLI::App& app) {
  auto args = std::make_shared<SyncArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sync", "The main job: a producer publishes RL-trace versions to N consumers; dense and gloo baselines alongside");
  cmd->add_option("--role", args->role,
                  "both (producer here, consumers as child processes), producer, consumer, group-producer (a trainer "
                  "rank of a sharded group, --commands) or group-consumer (a rollout process of one)")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "producer", "consumer", "group-consumer", "group-producer"}));
  cmd->add_option("--rank", args->rank, "Role group-producer: which trainer rank of --producers")->capture_default_str();
  cmd->add_option("--producers", args->producers,
                  "Trainer ranks, each publishing its shards (rows, columns, a flat range of the embedding); above 1, "
                  "or with --consumer-layout: a sharded trainer to resharded rollout layouts")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--consumer-layout", args->consumer_layouts,
                  "Rollout layouts, one per consumer: tpN (the next rank of N-way tensor parallelism, fused qkv_proj) "
                  "or tpN:r, comma-separated, e.g. tp2,tp2,tp1");
  cmd->add_option("--layout", args->layout, "Role group-consumer: its layout, tpN:r");
  cmd->add_option("--ranks", args->ranks,
                  "Role group-consumer: each trainer rank's control address, in rank order (or --coordinator)");
  cmd->add_option("--coordinator", args->coordinator,
                  "Roles group-*: the group coordinator's ADDR:PORT; trainer ranks register there (rank 0 hosts it), "
                  "rollout processes find the group there");
  cmd->add_flag("--coordinator-elsewhere", args->coordinator_elsewhere,
                "Role group-producer: the coordinator runs on its own (deltacast-bench coordinator); rank 0 registers "
                "with it like every rank");
  cmd->add_option("--consumers", args->consumers, "Consumer processes (role producer: how many to wait for)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--rails", args->rails, "Rails per process")->capture_default_str()->check(CLI::Range(1, 8));
  cmd->add_option("--transport", args->transport,
                  "Data transport: tcp, rdma, or auto (RDMA where a device is; without one, RDMA falls back to TCP "
                  "and says so)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tcp", "rdma", "auto"}));
  cmd->add_option("--elements", args->elements, "bf16 elements of the model (every role must agree)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 36));
  cmd->add_option("--versions", args->versions, "Sparse versions after the initial full sync")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  cmd->add_option("--lr", args->lr, "Learning rate of the trace (3e-7: ~0.8% of bf16 elements change per step)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Trace seed")->capture_default_str();
  cmd->add_option("--value-codec", args->value_codec, "ulp or raw")->capture_default_str()->check(CLI::IsMember({"ulp", "raw"}));
  cmd->add_option("--zstd", args->zstd, "zstd level for buckets (0: off)")->capture_default_str()->check(CLI::Range(0, 19));
  cmd->add_option("--wan-zstd", args->wan_zstd,
                  "zstd level a delta gets where consumers in other sites are behind a WAN link slower than zstd "
                  "costs, by measured rates (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
  cmd->add_option("--threads", args->threads, "Encode threads of the producer (0: all cores)")->capture_default_str();
  cmd->add_flag("!--no-dense", args->dense, "Skip the dense-sync baseline");
  cmd->add_option("--gloo", args->gloo, "torch.distributed gloo baseline: auto (if torch imports), on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("--netns", args->netns, "Each process in its own network namespace, switched shaped rails (root)");
  cmd->add_option("--rail-rate", args->rail_rate, "With --netns: tbf rate of every port, e.g. 1gbit")->capture_default_str();
  cmd->add_option("--listen", args->listen, "Role producer: control address ADDR:PORT")->capture_default_str();
  cmd->add_option("--connect", args->connect, "Role consumer: the producer's control address (repeat for alternatives)");
  cmd->add_option("--rail", args->rail_addresses, "Roles producer/consumer: this process's address on each rail (repeat)");
  add_trust_options(cmd, args->trust, "0xdc5eed");
  cmd->add_option("--name", args->name, "Role consumer: name shown in the producer's logs");
  cmd->add_option("--node", args->node,
                  "Role consumer: the host it counts as (default: the host name); consumers of one node take each "
                  "version over its rails once");
  cmd->add_option("--site", args->site,
                  "Roles producer/consumer: the site (datacenter, region) it runs in (default: the producer's); each "
                  "version crosses into a site once, over its WAN link");
  cmd->add_flag("--commands", args->commands,
                "Role producer: take commands on stdin (members N, publish [full|LR], republish, wait V, check V, hash, save PATH, stats, quit)");
  cmd->add_flag("--hash-commits", args->hash_commits,
                "Role consumer: each 'committed' event carries the producer epoch and the model's hash (soak checks)");
  cmd->add_flag("--die-with-parent", args->die_with_parent, "Exit when the parent process does");
  cmd->add_option("--timeout", args->timeout_seconds, "Seconds to wait for joins and each version")->capture_default_str();
  cmd->add_option("--round-timeout", args->round_timeout_seconds,
                  "Role producer: seconds one version's round may take before the members not done are failed "
                  "and left to the catch-up (0: 30 s plus the version's bytes at 10 MB/s)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shape", args->shape,
                  "Producers: how versions go out: chains, auto (the planner's choice per version), trees:2, "
                  "trees:4 or trees:8")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "chains", "trees:2", "trees:4", "trees:8"}));
  cmd->add_option("--device", args->device,
                  "Where every process's tensors live: cpu, or cuda (GPU 0: diff+encode and verify+apply on the GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--json", args->json, "JSON output");
  cmd->add_option("--plot", args->plot,
                  "Draw each version's time (encode / wire / apply) against the lower bound and the baselines, "
                  "and what it carried, into this PNG (matplotlib)");
  cmd->add_option("--metrics-port", args->metrics_port,
                  "Serve Prometheus metrics (docs/metrics.md) on all interfaces: the producer on this port, "
                  "consumer i on PORT+1+i (with --netns inside its namespace); -1: none")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65000));
  cmd->callback([args] {
    int rc = 0;
    if (args->role == "group-consumer") {
      rc = run_group_consumer_role(*args);
    } else if (args->role == "group-producer") {
      rc = run_group_producer_role(*args);
    } else if (args->role == "both" && (args->producers > 1 || !args->consumer_layouts.empty())) {
      rc = run_group_sync(*args);
    } else if (args->role == "consumer") {
      if (args->connect.empty()) {
        rc = command_failed("sync", invalid_argument("--role consumer needs --connect"));
      } else {
        rc = run_consumer_role(*args);
      }
    } else if (args->role == "producer") {
      rc = run_producer_role(*args);
    } else {
      rc = run_sync_both(*args);
    }
    throw CLI::RuntimeError(rc);
  });
}

}  // namespace deltacast::bench
