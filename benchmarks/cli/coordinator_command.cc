// deltacast-bench coordinator: a sharded group's coordinator on its own, for
// trainers that would rather not have rank 0 host it. Trainer ranks register
// with it (`sync --role group-producer --coordinator ADDR
// --coordinator-elsewhere`, or ProducerOptions::group, or Python's
// Producer(coordinator=...)); rollout processes find the group there. It
// learns the group's tensors from the first rank. Prints JSON lines:
// listening, then formed (every rank in) and re-formed (a rank moved); runs
// until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <thread>

#include "cli/bench_commands.h"
#include "cli/trust_options.h"
#include "broadcast/engine/group/group_coordinator.h"
#include "sync/sync_roles.h"

namespace deltacast::bench {

namespace {

struct CoordinatorArgs {
  uint32_t world = 1;
  std::string listen = "0.0.0.0:0";
  TrustArgs trust;
};

// Where every rank is, as text (to notice a rank that moved).
std::string where(const GroupView& group) {
  std::string out;
  for (const RankEntry& r : group.ranks) out += fmt::format("{}@{};", r.rank, r.addresses.front().to_string());
  return out;
}

int run(const CoordinatorArgs& args) {
  stop_on_signals();
  auto listen = parse_endpoint(args.listen);
  if (!listen.ok()) {
    emit({{"event", "error"}, {"error", listen.status().with_context("--listen").to_string()}});
    return 1;
  }
  GroupCoordinatorOptions options;
  options.listen = *listen;
  options.trust = trust_of(args.trust);
  auto coordinator = GroupCoordinator::create({}, args.world, options);
  if (!coordinator.ok()) {
    emit({{"event", "error"}, {"error", coordinator.status().to_string()}});
    return 1;
  }
  emit({{"event", "listening"}, {"address", (*coordinator)->address().to_string()}, {"world", args.world}});
  std::string formed;
  while (!stop_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto group = (*coordinator)->directory().group();
    if (!group.ok() || where(*group) == formed) continue;
    Json ranks = Json::array();
    for (const RankEntry& r : group->ranks) ranks.push_back({{"rank", r.rank}, {"address", r.addresses.front().to_string()}});
    emit({{"event", formed.empty() ? "formed" : "re-formed"}, {"tensors", group->logical.size()}, {"ranks", ranks}});
    formed = where(*group);
  }
  (*coordinator)->close();
  emit({{"event", "exit"}});
  return 0;
}

}  // namespace

void add_coordinator_command(CLI::App& app) {
  auto args = std::make_shared<CoordinatorArgs>();
  CLI::App* cmd = app.add_subcommand("coordinator",
                                     "A sharded group's coordinator on its own: trainer ranks register with it, "
                                     "rollout processes find the group there (JSON lines; until SIGINT/SIGTERM)");
  cmd->add_option("--world", args->world, "Trainer ranks in the group")->required()->check(CLI::Range(1u, 1u << 16));
  cmd->add_option("--listen", args->listen, "ADDR:PORT to listen on")->capture_default_str();
  add_trust_options(cmd, args->trust, "0");
  cmd->callback([args] { throw CLI::RuntimeError(run(*args)); });
}

}  // namespace deltacast::bench
