#include "sync/sync_group.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <iostream>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "broadcast/engine/group/group_consumer.h"
#include "broadcast/engine/plan/planner.h"
#include "cli/child_process.h"
#include "cli/trust_options.h"
#include "core/hash.h"
#include "core/held_ranges.h"
#include "sparse/trace/model_layout.h"

namespace deltacast::bench {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// What every role derives from --elements and --producers: the logical model and every rank's pieces.
struct GroupModel {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<LocalTensorSpec>> rank_pieces;
  std::vector<Layout> ranks;
};

Result<GroupModel> group_model(uint64_t elements, int producers) {
  if (producers < 1) return invalid_argument("--producers {}: at least one trainer rank", producers);
  GroupModel g;
  g.specs = transformer_layout(elements, DType::kBF16);
  for (int r = 0; r < producers; ++r) {
    DC_ASSIGN_OR_RETURN(auto pieces, trainer_shards(g.specs, static_cast<uint32_t>(r), static_cast<uint32_t>(producers)));
    DC_ASSIGN_OR_RETURN(Layout layout, Layout::resolve(g.specs, pieces));
    g.rank_pieces.push_back(std::move(pieces));
    g.ranks.push_back(std::move(layout));
  }
  return g;
}

Result<Layout> rollout_layout(const GroupModel& g, const TpLayout& tp) {
  DC_ASSIGN_OR_RETURN(auto views, tensor_parallel_views(g.specs, tp.rank, tp.world));
  return Layout::resolve(g.specs, std::move(views));
}

// The trace every role of a run steps the same way (same seed and learning rates).
Result<std::unique_ptr<RlTrace>> group_trace(const SyncArgs& args, const GroupModel& model) {
  TraceOptions options;
  options.seed = args.seed;
  options.lr = args.lr;
  options.threads = args.threads;
  return RlTrace::create(model.specs, options);
}

// A trainer rank's producer options: the run's secret, transport and codec, `threads` codec threads.
Result<ProducerOptions> rank_options(const SyncArgs& args, std::vector<Endpoint> rails, unsigned threads) {
  ProducerOptions options;
  options.trust = trust_of(args.trust);
  options.transport = args.transport;
  options.rails = std::move(rails);
  DC_ASSIGN_OR_RETURN(options.codec.value_codec, parse_value_codec(args.value_codec));
  options.codec.zstd_level = args.zstd;
  options.codec.threads = threads;
  DC_ASSIGN_OR_RETURN(options.round.fanout, parse_shape(args.shape));
  return options;
}

// Trainer rank `rank`'s seat in the group at `coordinator` (rank 0 hosts it unless `elsewhere`).
GroupSeatOptions rank_seat(const GroupModel& model, uint32_t rank, const Endpoint& coordinator, bool elsewhere) {
  GroupSeatOptions seat;
  seat.coordinator = {coordinator};
  seat.host = rank == 0 && !elsewhere;
  seat.rank = rank;
  seat.world = static_cast<uint32_t>(model.ranks.size());
  seat.logical = model.specs;
  seat.pieces = model.rank_pieces[rank];
  return seat;
}

unsigned per_rank_threads(const SyncArgs& args) {
  if (args.threads > 0) return args.threads;
  return std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(args.producers));
}

// A trainer rank in the orchestrating process: its shard tensors and its producer.
struct Rank {
  std::unique_ptr<ResidentTensors> tensors;
  std::unique_ptr<Producer> producer;
};

// A rollout process: its layout, and what it reported.
struct Rollout {
  TpLayout tp;
  std::string name;
  Layout layout;
  std::vector<uint64_t> held_per_rank;  // elements of each rank's tensors it holds
  std::unique_ptr<ResidentTensors> expected;
  std::unique_ptr<ChildProcess> child;
};

}  // namespace

std::string TpLayout::text() const { return fmt::format("tp{}:{}", world, rank); }

Result<std::vector<TpLayout>> parse_consumer_layouts(const std::vector<std::string>& texts) {
  std::vector<std::string> entries;
  for (const auto& t : texts) {
    size_t at = 0;
    while (at <= t.size()) {
      const size_t comma = t.find(',', at);
      const std::string entry = t.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (!entry.empty()) entries.push_back(entry);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  std::map<uint32_t, uint32_t> next_rank;
  std::vector<TpLayout> out;
  for (const auto& e : entries) {
    unsigned world = 0, rank = 0;
    char tail = 0;
    const int n = std::sscanf(e.c_str(), "tp%u:%u%c", &world, &rank, &tail);
    if (n < 1 || n > 2 || world == 0 || world > 64 || (n == 2 && rank >= world)) {
      return invalid_argument("consumer layout '{}': expected tpN (N = 1..64) or tpN:r with r < N", e);
    }
    if (n == 1 && e != fmt::format("tp{}", world)) {
      return invalid_argument("consumer layout '{}': expected tpN (N = 1..64) or tpN:r with r < N", e);
    }
    if (n == 1) rank = next_rank[world]++ % world;
    out.push_back(TpLayout{world, rank});
  }
  if (out.empty()) return invalid_argument("no consumer layout given (e.g. --consumer-layout tp2,tp2,tp1)");
  return out;
}

int run_group_consumer_role(const SyncArgs& args) {
  if (args.die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);
  stop_on_signals();
  const auto fail = [](const Status& s) {
    emit({{"event", "error"}, {"error", s.to_string()}});
    return 1;
  };
  auto tp = parse_consumer_layouts({args.layout});
  if (!tp.ok()) return fail(tp.status());
  if (tp->size() != 1) return fail(invalid_argument("--layout: one layout, tpN:r"));
  auto model = group_model(args.elements, args.producers);
  if (!model.ok()) return fail(model.status());
  if (args.coordinator.empty() == args.ranks.empty()) {
    return fail(invalid_argument("give the group coordinator's address (--coordinator) or every rank's (--ranks)"));
  }
  if (!args.ranks.empty() && args.ranks.size() != static_cast<size_t>(args.producers)) {
    return fail(invalid_argument("--ranks: {} addresses for {} trainer ranks", args.ranks.size(), args.producers));
  }
  auto addresses = parse_endpoints(args.coordinator.empty() ? args.ranks : std::vector<std::string>{args.coordinator});
  if (!addresses.ok()) return fail(addresses.status());
  auto rails = parse_endpoints(args.rail_addresses.empty() ? std::vector<std::string>{"127.0.0.1"} : args.rail_addresses);
  if (!rails.ok()) return fail(rails.status());
  auto views = tensor_parallel_views(model->specs, (*tp)[0].rank, (*tp)[0].world);
  if (!views.ok()) return fail(views.status());
  auto layout = Layout::resolve(model->specs, *views);
  if (!layout.ok()) return fail(layout.status());
  ThreadPool pool(args.threads);
  ResidentTensors tensors(layout->local_specs(), pool);
  ConsumerOptions options;
  options.trust = trust_of(args.trust);
  options.rails = *rails;
  options.name = args.name.empty() ? fmt::format("rollout-{}", getpid()) : args.name;
  options.threads = args.threads;
  options.transport = args.transport;
  const Millis timeout(static_cast<int64_t>(args.timeout_seconds * 1000));
  Result<std::unique_ptr<GroupConsumer>> group = invalid_argument("no group");
  if (!args.coordinator.empty()) {
    group = GroupConsumer::find(*addresses, *views, tensors.views, options, timeout, &model->specs);
  } else {
    std::vector<GroupRank> ranks;
    for (size_t k = 0; k < addresses->size(); ++k) ranks.push_back({model->rank_pieces[k], {(*addresses)[k]}, nullptr});
    group = GroupConsumer::create(model->specs, *views, tensors.views, std::move(ranks), options);
  }
  if (!group.ok()) return fail(group.status());
  GroupConsumer& g = **group;
  if (Status s = g.start(timeout); !s.ok()) return fail(s);
  emit({{"event", "joined"}, {"layout", (*tp)[0].text()}, {"ranks", g.state().ranks}});
  uint64_t seen = 0;
  while (!stop_requested()) {
    if (!g.wait_version(seen + 1, Millis(100)).ok()) continue;
    std::shared_lock<std::shared_mutex> reading(g.tensors_mutex());
    seen = g.version();
    emit({{"event", "committed"}, {"version", seen}, {"hash", model_hash(tensors.views.data(), tensors.views.size(), pool)}});
  }
  g.close();
  emit({{"event", "exit"}, {"version", seen}});
  return 0;
}

namespace {

// One command of the group-producer role; false once it is told to quit.
bool run_group_command(const std::string& line, const GroupModel& model, RlTrace& trace, Producer& producer,
                       ThreadPool& pool) {
  std::istringstream in(line);
  std::string command, argument, extra;
  in >> command >> argument >> extra;
  const auto number = [](const std::string& text, double fallback) { return text.empty() ? fallback : std::stod(text); };
  if (command == "quit" || command == "exit") return false;
  if (command == "step") {
    if (!argument.empty()) {
      if (Status s = trace.set_lr(std::stod(argument)); !s.ok()) {
        emit({{"event", "error"}, {"error", s.to_string()}});
        return true;
      }
    }
    trace.step();
    emit({{"event", "stepped"}, {"steps", trace.steps_done()}});
  } else if (command == "publish") {
    auto v = producer.publish(argument == "full" || extra == "full", argument == "full" ? 0 : std::stoull(argument));
    if (v.ok()) {
      emit({{"event", "published"}, {"version", *v}});
    } else {
      emit({{"event", "error"}, {"error", v.status().to_string()}});
    }
  } else if (command == "members") {
    const Status s = producer.wait_members(std::stoul(argument), Millis(static_cast<int64_t>(number(extra, 60) * 1000)));
    emit({{"event", "members"}, {"ok", s.ok()}, {"error", s.message()}});
  } else if (command == "wait") {
    const uint64_t version = std::stoull(argument);
    const Status s = producer.wait(version, Millis(static_cast<int64_t>(number(extra, 60) * 1000)));
    const VersionReport r = producer.report(version).value_or(VersionReport{});
    emit({{"event", "waited"},
          {"version", version},
          {"ok", s.ok()},
          {"error", s.message()},
          {"full", r.full},
          {"density", r.stats.density()},
          {"wire_bytes", r.stats.wire_bytes},
          {"bytes_to", r.bytes_to},
          {"committed", r.committed},
          {"targets", r.targets}});
  } else if (command == "view-hash") {
    auto tp = parse_consumer_layouts({argument});
    auto layout = tp.ok() ? rollout_layout(model, (*tp)[0]) : Result<Layout>(tp.status());
    if (!layout.ok()) {
      emit({{"event", "error"}, {"error", layout.status().to_string()}});
      return true;
    }
    ResidentTensors view(layout->local_specs(), pool);
    gather_views(*layout, trace.published(), view.views);
    emit({{"event", "view_hash"}, {"layout", argument}, {"steps", trace.steps_done()},
          {"hash", model_hash(view.views.data(), view.views.size(), pool)}});
  } else {
    emit({{"event", "error"}, {"error", fmt::format("unknown command '{}'", line)}});
  }
  return true;
}

}  // namespace

int run_group_producer_role(const SyncArgs& args) {
  if (args.die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);
  const auto fail = [](const Status& s) {
    emit({{"event", "error"}, {"error", s.to_string()}});
    return 1;
  };
  if (!args.commands) return fail(invalid_argument("--role group-producer takes its steps as --commands on stdin"));
  auto model = group_model(args.elements, args.producers);
  if (!model.ok()) return fail(model.status());
  if (args.rank < 0 || args.rank >= args.producers) {
    return fail(invalid_argument("--rank {} of --producers {}", args.rank, args.producers));
  }
  auto listen = parse_endpoint(args.listen.empty() ? "127.0.0.1:0" : args.listen);
  if (!listen.ok()) return fail(listen.status());
  auto rails = parse_endpoints(args.rail_addresses);
  if (!rails.ok()) return fail(rails.status());
  auto trace = group_trace(args, *model);
  if (!trace.ok()) return fail(trace.status());
  ThreadPool pool(args.threads);
  const Layout& owner = model->ranks[static_cast<size_t>(args.rank)];
  ResidentTensors tensors(owner.local_specs(), pool);
  auto options = rank_options(args, *rails, args.threads);
  if (!options.ok()) return fail(options.status());
  options->listen = *listen;
  if (!args.coordinator.empty()) {
    auto coordinator = parse_endpoint(args.coordinator);
    if (!coordinator.ok()) return fail(coordinator.status().with_context("--coordinator"));
    options->group = rank_seat(*model, static_cast<uint32_t>(args.rank), *coordinator, args.coordinator_elsewhere);
  }
  auto manifest = Manifest::create(owner.local_specs());
  if (!manifest.ok()) return fail(manifest.status());
  auto producer = Producer::create(*manifest, tensors.views, *options);
  if (!producer.ok()) return fail(producer.status());
  const auto coordinator = (*producer)->group_coordinator();
  emit({{"event", "listening"}, {"rank", args.rank}, {"address", (*producer)->address().to_string()},
        {"transport", std::string((*producer)->transport())},
        {"coordinator", coordinator ? coordinator->to_string() : args.coordinator}});
  if (Status s = (*producer)->wait_registered(Millis(static_cast<int64_t>(args.timeout_seconds * 1000))); !s.ok()) {
    return fail(s);
  }
  if (!args.coordinator.empty()) emit({{"event", "registered"}, {"rank", args.rank}});
  std::string line;
  while (std::getline(std::cin, line)) {
    // The rank's tensors follow the trace before every command (they are what it publishes).
    gather_views(owner, (*trace)->published(), tensors.views);
    bool go_on = true;
    try {
      go_on = run_group_command(line, *model, **trace, **producer, pool);
    } catch (const std::exception& e) {  // a number that does not parse
      emit({{"event", "error"}, {"error", fmt::format("command '{}': {}", line, e.what())}});
    }
    if (!go_on) break;
  }
  (*producer)->close();
  emit({{"event", "exit"}});
  return 0;
}

int run_group_sync(const SyncArgs& args) {
  const auto fail = [](const Status& s) {
    fmt::print(stderr, "deltacast-bench sync: {}\n", s.to_string());
    return 1;
  };
  if (args.netns) return fail(invalid_argument("--producers and --consumer-layout run on loopback rails (no --netns yet)"));
  Progress progress(true);
  auto layouts = parse_consumer_layouts(args.consumer_layouts.empty() ? std::vector<std::string>{"tp1"} : args.consumer_layouts);
  if (!layouts.ok()) return fail(layouts.status());
  auto model = group_model(args.elements, args.producers);
  if (!model.ok()) return fail(model.status());
  const Millis timeout(static_cast<int64_t>(args.timeout_seconds * 1000));
  const unsigned threads = per_rank_threads(args);

  progress.update(fmt::format("preparing the trace: {} bf16 elements", args.elements));
  auto trace = group_trace(args, *model);
  if (!trace.ok()) return fail(trace.status());
  const auto logical = (*trace)->published();
  ThreadPool pool(args.threads);

  // The trainer ranks, each with its own codec threads (a rank's process has its own cores);
  // rank 0 hosts the group's coordinator, every rank registers with it, and the rollout
  // processes find the group there.
  const auto rail = [](int r, int who) { return fmt::format("127.{}.0.{}", r + 1, who + 2); };  // who -1: trainer
  std::vector<Rank> ranks(static_cast<size_t>(args.producers));
  Endpoint coordinator{"127.0.0.1", 0};
  for (int k = 0; k < args.producers; ++k) {
    Rank& rank = ranks[static_cast<size_t>(k)];
    const Layout& owner = model->ranks[static_cast<size_t>(k)];
    rank.tensors = std::make_unique<ResidentTensors>(owner.local_specs(), pool);
    std::vector<Endpoint> rails;
    for (int r = 0; r < args.rails; ++r) rails.push_back(Endpoint{rail(r, -1), 0});
    auto options = rank_options(args, std::move(rails), threads);
    if (!options.ok()) return fail(options.status());
    options->group = rank_seat(*model, static_cast<uint32_t>(k), coordinator, false);
    auto manifest = Manifest::create(owner.local_specs());
    if (!manifest.ok()) return fail(manifest.status());
    auto producer = Producer::create(*manifest, rank.tensors->views, *options);
    if (!producer.ok()) return fail(producer.status().with_context(fmt::format("trainer rank {}", k)));
    rank.producer = std::move(producer).value();
    if (k == 0) coordinator = *rank.producer->group_coordinator();
  }
  for (int k = 0; k < args.producers; ++k) {
    if (Status s = ranks[static_cast<size_t>(k)].producer->wait_registered(timeout); !s.ok()) {
      return fail(s.with_context(fmt::format("trainer rank {}", k)));
    }
  }

  // The rollout processes: children of this executable.
  const std::string self = executable_dir() + "/deltacast-bench";
  std::vector<Rollout> rollouts;
  std::vector<size_t> members(ranks.size(), 0);
  for (size_t c = 0; c < layouts->size(); ++c) {
    Rollout ro{(*layouts)[c], fmt::format("c{}", c), {}, {}, nullptr, nullptr};
    auto layout = rollout_layout(*model, ro.tp);
    if (!layout.ok()) return fail(layout.status().with_context(ro.tp.text()));
    ro.layout = std::move(layout).value();
    for (size_t k = 0; k < ranks.size(); ++k) {
      auto route = Layout::compose(model->ranks[k], ro.layout);
      if (!route.ok()) return fail(route.status());
      ro.held_per_rank.push_back(HeldRanges::of(*route).held_elements());
      if (ro.held_per_rank.back() > 0) ++members[k];
    }
    ro.expected = std::make_unique<ResidentTensors>(ro.layout.local_specs(), pool);
    std::vector<std::string> argv = {self, "sync", "--role", "group-consumer", "--elements", std::to_string(args.elements),
                                     "--producers", std::to_string(args.producers), "--layout", ro.tp.text(),
                                     "--name", ro.name, "--transport",
                                     std::string(ranks[0].producer->transport()), "--threads", std::to_string(threads),
                                     "--die-with-parent"};
    argv.insert(argv.end(), {"--coordinator", coordinator.to_string()});
    for (const std::string& a : args.trust.command_line()) argv.push_back(a);
    for (int r = 0; r < args.rails; ++r) argv.insert(argv.end(), {"--rail", rail(r, static_cast<int>(c))});
    auto child = ChildProcess::spawn(argv, false);
    if (!child.ok()) return fail(child.status());
    ro.child = std::move(child).value();
    rollouts.push_back(std::move(ro));
  }
  progress.update(fmt::format("waiting for {} rollout processes to join {} trainer ranks", rollouts.size(), ranks.size()));
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (Status s = ranks[k].producer->wait_members(members[k], timeout); !s.ok()) {
      return fail(s.with_context(fmt::format("trainer rank {}", k)));
    }
  }

  // One encoder holding the whole model, for the encode baseline (same threads as one rank).
  auto single = DeltaEncoder::create((*trace)->manifest(), rank_options(args, {}, threads)->codec);
  if (!single.ok()) return fail(single.status());
  std::optional<Shadow> single_shadow;

  Json rows = Json::array();
  bool all_exact = true;
  double worst_share_ratio = 0;
  std::vector<double> encode_ratios;
  const int versions = args.versions + 1;
  for (int v = 1; v <= versions; ++v) {
    const bool full = v == 1;
    if (!full) (*trace)->step();
    progress.update(fmt::format("version {}/{}: {} from {} trainer ranks", v, versions, full ? "full sync" : "step",
                                ranks.size()));
    for (size_t k = 0; k < ranks.size(); ++k) gather_views(model->ranks[k], logical, ranks[k].tensors->views);
    // Every rank publishes at once, as a sharded trainer's ranks do after a step.
    std::vector<Status> published(ranks.size());
    const auto start = Clock::now();
    {
      std::vector<std::thread> publishers;
      for (size_t k = 0; k < ranks.size(); ++k) {
        publishers.emplace_back([&, k] { published[k] = ranks[k].producer->publish(full, static_cast<uint64_t>(v)).status(); });
      }
      for (auto& t : publishers) t.join();
    }
    for (size_t k = 0; k < ranks.size(); ++k) {
      if (!published[k].ok()) return fail(published[k].with_context(fmt::format("trainer rank {}", k)));
    }
    std::optional<double> single_seconds;
    if (full) {
      auto copy = Shadow::copy_of((*trace)->manifest(), logical, 1);
      if (!copy.ok()) return fail(copy.status());
      single_shadow.emplace(std::move(copy).value());
    } else {
      const auto t0 = Clock::now();
      auto encoded = single->encode_delta(logical, *single_shadow, static_cast<uint64_t>(v));
      if (!encoded.ok()) return fail(encoded.status());
      single_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    for (size_t k = 0; k < ranks.size(); ++k) {
      if (Status s = ranks[k].producer->wait(static_cast<uint64_t>(v), timeout); !s.ok()) {
        return fail(s.with_context(fmt::format("trainer rank {}, version {}", k, v)));
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<VersionReport> reports;
    uint64_t wire = 0, changed = 0, elements = 0;
    double encode = 0;
    for (const Rank& rank : ranks) {
      reports.push_back(rank.producer->report(static_cast<uint64_t>(v)).value_or(VersionReport{}));
      wire += reports.back().stats.wire_bytes;
      changed += reports.back().stats.changed;
      elements += reports.back().stats.elements;
      encode = std::max(encode, reports.back().encode_seconds);
    }
    Json consumers = Json::array();
    for (Rollout& ro : rollouts) {
      // What it reports holding against the logical model's view.
      bool exact = false;
      uint64_t hash = 0;
      for (;;) {
        auto line = ro.child->read_line(timeout);
        if (!line.ok()) return fail(line.status().with_context(ro.name));
        const Json e = Json::parse(*line, nullptr, false);
        if (e.is_discarded()) continue;
        if (e.value("event", "") == "error") return fail(internal_error("{}: {}", ro.name, e.value("error", "")));
        if (e.value("event", "") == "committed" && e.value("version", uint64_t{0}) >= static_cast<uint64_t>(v)) {
          exact = e.value("version", uint64_t{0}) == static_cast<uint64_t>(v);
          hash = e.value("hash", uint64_t{0});
          break;
        }
      }
      gather_views(ro.layout, logical, ro.expected->views);
      exact = exact && hash == model_hash(ro.expected->views.data(), ro.expected->views.size(), pool);
      all_exact = all_exact && exact;
      uint64_t received = 0;
      double share = 0;
      for (size_t k = 0; k < ranks.size(); ++k) {
        if (ro.held_per_rank[k] == 0) continue;
        const auto sent = reports[k].bytes_to.find(fmt::format("{}.r{}", ro.name, k));
        if (sent != reports[k].bytes_to.end()) received += sent->second;
        share += static_cast<double>(reports[k].stats.wire_bytes) * static_cast<double>(ro.held_per_rank[k]) /
                 static_cast<double>(reports[k].stats.elements);
      }
      if (!full && share > 0) worst_share_ratio = std::max(worst_share_ratio, static_cast<double>(received) / share);
      consumers.push_back({{"name", ro.name},
                           {"layout", ro.tp.text()},
                           {"received_bytes", received},
                           {"share_bytes", static_cast<uint64_t>(share)},
                           {"exact", exact}});
    }
    if (single_seconds && *single_seconds > 0) encode_ratios.push_back(encode / *single_seconds);
    rows.push_back({{"version", v},
                    {"step", v - 1},
                    {"full", full},
                    {"density", elements == 0 ? 0.0 : static_cast<double>(changed) / static_cast<double>(elements)},
                    {"wire_bytes", wire},
                    {"seconds", seconds},
                    {"encode_seconds", encode},
                    {"single_producer_encode_seconds", single_seconds ? Json(*single_seconds) : Json()},
                    {"consumers", consumers}});
  }
  progress.finish();
  for (auto& ro : rollouts) ro.child->terminate();
  for (auto& rank : ranks) rank.producer->close();

  std::sort(encode_ratios.begin(), encode_ratios.end());
  const Json report = {{"mode", "sharded"},
                       {"producers", args.producers},
                       {"consumer_layouts", [&] {
                          Json l = Json::array();
                          for (const auto& ro : rollouts) l.push_back(ro.tp.text());
                          return l;
                        }()},
                       {"elements", args.elements},
                       {"threads_per_rank", threads},
                       {"cores", std::thread::hardware_concurrency()},
                       {"transport", std::string(args.transport)},
                       {"versions", rows},
                       {"max_received_over_share", worst_share_ratio},
                       {"median_encode_vs_single_producer",
                        encode_ratios.empty() ? Json() : Json(encode_ratios[encode_ratios.size() / 2])},
                       {"all_exact", all_exact}};
  if (args.json) {
    fmt::print("{}\n", report.dump());
  } else {
    fmt::print("deltacast-bench sync: {} trainer ranks -> {} rollout processes, {} bf16 elements\n", args.producers,
               rollouts.size(), args.elements);
    fmt::print("{:>7} {:>5} {:>9} {:>11} {:>9} {:>9}  per consumer: received / share (exact)\n", "version", "full",
               "density", "wire", "encode", "1-rank");
    for (const Json& r : rows) {
      std::string per;
      for (const Json& c : r["consumers"]) {
        per += fmt::format("  {} {} {}/{} ({})", c["name"].get<std::string>(), c["layout"].get<std::string>(),
                           human_bytes(c["received_bytes"].get<double>()), human_bytes(c["share_bytes"].get<double>()),
                           c["exact"].get<bool>() ? "exact" : "NOT EXACT");
      }
      fmt::print("{:>7} {:>5} {:>8.3f}% {:>11} {:>8.3f}s {:>9}{}\n", r["version"].get<int>(), r["full"].get<bool>() ? "yes" : "",
                 100 * r["density"].get<double>(), human_bytes(r["wire_bytes"].get<double>()),
                 r["encode_seconds"].get<double>(),
                 r["single_producer_encode_seconds"].is_null()
                     ? std::string("-")
                     : fmt::format("{:.3f}s", r["single_producer_encode_seconds"].get<double>()),
                 per);
    }
    fmt::print("  worst received / share over sparse versions: {:.3f}; encode with {} ranks in parallel vs one "
               "producer holding everything (median): {}\n",
               worst_share_ratio, args.producers,
               report["median_encode_vs_single_producer"].is_null()
                   ? std::string("-")
                   : fmt::format("{:.2f}x", report["median_encode_vs_single_producer"].get<double>()));
    fmt::print("  every version bit-exact on every consumer: {}\n", all_exact ? "yes" : "NO");
  }
  return all_exact ? 0 : 1;
}

}  // namespace deltacast::bench
