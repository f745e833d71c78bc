#include "sync/sync_roles.h"

#include <signal.h>
#include <sys/prctl.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/plan/planner.h"
#include "core/aligned_buffer.h"
#include "core/parallel_memory.h"
#include "sync/gloo_baseline.h"
#include "sparse/trace/model_layout.h"
#include "cli/trust_options.h"

namespace deltacast::bench {

namespace {

using Json = nlohmann::json;

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop = true; }

Json optional_json(const std::optional<double>& v) { return v ? Json(*v) : Json(); }
Json optional_json(const std::optional<bool>& v) { return v ? Json(*v) : Json(); }

}  // namespace

ResidentTensors::ResidentTensors(const std::vector<TensorSpec>& specs, ThreadPool& pool) {
  storage.reserve(specs.size());
  for (const auto& t : specs) {
    storage.emplace_back(t.nbytes());
    touch_pages(storage.back().data(), storage.back().size(), pool);
    views.push_back(TensorView{storage.back().data(), t.dtype, t.numel(), Device{}});
  }
}

void stop_on_signals() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

bool stop_requested() { return g_stop; }

void emit(const Json& event) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cout << event.dump() << std::endl;
}

Result<std::vector<Endpoint>> parse_endpoints(const std::vector<std::string>& texts) {
  std::vector<Endpoint> out;
  for (const auto& t : texts) {
    DC_ASSIGN_OR_RETURN(Endpoint e, parse_endpoint(t));
    out.push_back(e);
  }
  return out;
}

Result<Manifest> sync_manifest(uint64_t elements) { return Manifest::create(transformer_layout(elements, DType::kBF16)); }

Json VersionRow::to_json() const {
  const auto& r = report;
  Json j = {{"version", version},
            {"full", full},
            {"density", r.stats.density()},
            {"changed", r.stats.changed},
            {"elements", r.stats.elements},
            {"wire_bytes", r.stats.wire_bytes},
            {"zstd_level", r.stats.zstd_level},
            {"wan_rate", r.wan_rate},
            {"dense_bytes", r.stats.dense_bytes},
            {"seconds", r.seconds},
            {"encode_seconds", r.encode_seconds},
            {"queue_seconds", r.queue_seconds},
            {"wire_seconds", r.wire_seconds},
            {"apply_seconds", r.apply_seconds},
            {"staged_seconds", r.staged_by},
            {"slow", r.slow},
            {"effective_gbps", r.seconds > 0 ? static_cast<double>(r.stats.dense_bytes) / r.seconds / 1e9 : 0.0},
            {"consumers", r.targets},
            {"committed", r.committed},
            {"slice_bytes", r.slice_bytes},
            {"stripes", r.stripes},
            {"fanout", r.fanout},
            {"replans", r.replans},
            {"standby_replans", r.standby_replans},
            {"exact", optional_json(exact)},
            {"lower_bound_seconds", optional_json(lower_bound_seconds)},
            {"dense_seconds", optional_json(dense_seconds)},
            {"dense_exact", optional_json(dense_exact)},
            {"gloo_seconds", optional_json(gloo_seconds)},
            {"gloo_exact", optional_json(gloo_exact)}};
  j["ratio_to_lower_bound"] =
      lower_bound_seconds && *lower_bound_seconds > 0 ? Json(r.seconds / *lower_bound_seconds) : Json();
  j["speedup_vs_dense"] = dense_seconds && r.seconds > 0 ? Json(*dense_seconds / r.seconds) : Json();
  j["speedup_vs_gloo"] = gloo_seconds && r.seconds > 0 ? Json(*gloo_seconds / r.seconds) : Json();
  return j;
}

Result<std::unique_ptr<SyncProducer>> SyncProducer::create(const SyncArgs& args, Endpoint listen,
                                                           std::vector<Endpoint> rails, std::string netns) {
  auto sync = std::make_unique<SyncProducer>();
  TraceOptions trace;
  trace.seed = args.seed;
  trace.lr = args.lr;
  trace.threads = args.threads;
  DC_ASSIGN_OR_RETURN(sync->trace_, RlTrace::create(transformer_layout(args.elements, DType::kBF16), trace));
  ProducerOptions options;
  options.listen = std::move(listen);
  options.trust = trust_of(args.trust);
  options.rails = std::move(rails);
  options.transport = args.transport;
  options.netns = std::move(netns);
  DC_ASSIGN_OR_RETURN(options.codec.value_codec, parse_value_codec(args.value_codec));
  options.codec.zstd_level = args.zstd;
  options.wan_zstd_level = args.wan_zstd;
  options.codec.threads = args.threads;
  options.round.timeout = Millis(static_cast<int64_t>(args.round_timeout_seconds * 1000));
  DC_ASSIGN_OR_RETURN(options.round.fanout, parse_shape(args.shape));
  options.round.site = args.site;
  if (args.metrics_port >= 0) options.metrics = Endpoint{"0.0.0.0", static_cast<uint16_t>(args.metrics_port)};
  auto published = sync->trace_->published();
  if (args.device == "cuda") {
    // The trainer's weights on the GPU: each step of the trace is copied in before it is published.
    DC_ASSIGN_OR_RETURN(sync->gpu_, DeviceTensors::allocate(sync->trace_->manifest().tensors(), 0));
    DC_RETURN_IF_ERROR(sync->gpu_->upload(published));
    published = sync->gpu_->views();
  }
  DC_ASSIGN_OR_RETURN(sync->producer_, Producer::create(sync->trace_->manifest(),
                                                        std::vector<TensorView>(published.begin(), published.end()),
                                                        options));
  return sync;
}

Status SyncProducer::wait(uint64_t version, Millis timeout) {
  if (!on_progress_) return producer_->wait(version, timeout);
  constexpr Millis kEvery(250);
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now());
    Status s = producer_->wait(version, std::min(left, kEvery));
    if (s.ok() || s.code() != StatusCode::kDeadlineExceeded || left <= kEvery) return s;
    if (auto p = producer_->progress(); p && p->version == version) on_progress_(*p);
  }
}

Result<VersionRow> SyncProducer::publish(bool full, bool step, bool check, Millis timeout) {
  if (step) trace_->step();
  if (step && gpu_) {
    DC_RETURN_IF_ERROR(gpu_->upload(trace_->published()));  // the optimizer step, on the GPU
  }
  DC_ASSIGN_OR_RETURN(uint64_t version, producer_->publish(full));
  DC_RETURN_IF_ERROR(wait(version, timeout));
  VersionRow row;
  row.version = version;
  row.report = producer_->report(version).value_or(VersionReport{});
  row.full = row.report.full;
  if (check) {
    DC_ASSIGN_OR_RETURN(CheckReport report, producer_->check(version, timeout));
    row.exact = report.all_exact() && !report.members.empty() && row.report.committed == row.report.targets &&
                report.members.size() == row.report.targets;
  }
  return row;
}

Result<SyncRun> run_versions(SyncProducer& sync, const SyncArgs& args, GlooBaseline* gloo, Progress& progress) {
  const Millis timeout(static_cast<int64_t>(args.timeout_seconds * 1000));
  const double model_bytes = static_cast<double>(sync.trace().manifest().total_bytes());
  std::vector<VersionRow> rows;
  // A long version shows how far it is: bytes arrived at the consumers, rate, time to go.
  sync.on_progress([&progress](const RoundProgress& p) {
    progress.update(fmt::format("version {} ({}): {} of {} at the consumers ({:.0f}%), {}/s, about {:.1f} s to go",
                                p.version, p.full ? "full" : "delta", human_bytes(static_cast<double>(p.received_bytes)),
                                human_bytes(static_cast<double>(p.bytes) * p.targets), 100 * p.fraction(),
                                human_bytes(p.rate()), std::max(0.0, p.eta_seconds())));
  });
  progress.update(fmt::format("version 1: full sync of {} to every consumer", human_bytes(model_bytes)));
  DC_ASSIGN_OR_RETURN(VersionRow initial, sync.publish(/*full=*/true, /*step=*/false, /*check=*/true, timeout));
  rows.push_back(initial);
  std::vector<VersionRow> dense_rows;
  for (int k = 1; k <= args.versions; ++k) {
    progress.update(fmt::format("step {}/{}: optimizer step, then a sparse version", k, args.versions));
    DC_ASSIGN_OR_RETURN(VersionRow row, sync.publish(false, true, true, timeout));
    if (args.dense) {
      progress.update(fmt::format("step {}/{}: the same tensors as a dense sync (baseline)", k, args.versions));
      DC_ASSIGN_OR_RETURN(VersionRow dense, sync.publish(true, false, true, timeout));
      row.dense_seconds = dense.report.seconds;
      row.dense_exact = dense.exact;
      dense_rows.push_back(dense);
    }
    if (gloo != nullptr) {
      progress.update(fmt::format("step {}/{}: the same tensors through torch.distributed gloo (baseline)", k,
                                  args.versions));
      auto outcome = gloo->broadcast(sync.trace().published());
      if (outcome.ok()) {
        row.gloo_seconds = outcome->seconds;
        row.gloo_exact = outcome->exact;
      } else {
        progress.update(fmt::format("gloo baseline failed: {}", outcome.status().message()));
      }
    }
    rows.push_back(row);
    progress.update(fmt::format("step {}/{}: {:.3f}% changed, {} in {:.3f} s{}{}", k, args.versions,
                                100 * row.report.stats.density(), human_bytes(static_cast<double>(row.report.stats.wire_bytes)),
                                row.report.seconds,
                                row.dense_seconds ? fmt::format("; dense {:.3f} s", *row.dense_seconds) : "",
                                row.gloo_seconds ? fmt::format("; gloo {:.3f} s", *row.gloo_seconds) : ""));
  }
  // The link rate comes from every full round of the run (the initial sync and the dense baselines).
  SyncRun run;
  run.transport = std::string(sync.producer().transport());
  for (const auto* set : {&rows, &dense_rows}) {
    for (const auto& r : *set) {
      if (r.full && r.report.wire_seconds > 0) {
        run.link_rate = std::max(run.link_rate, static_cast<double>(r.report.stats.wire_bytes) / r.report.wire_seconds);
      }
    }
  }
  for (auto* set : {&rows, &dense_rows}) {
    for (auto& r : *set) {
      if (run.link_rate > 0) r.lower_bound_seconds = static_cast<double>(r.report.stats.wire_bytes) / run.link_rate;
    }
  }
  run.rows = std::move(rows);
  run.dense_rows = std::move(dense_rows);
  return run;
}

Json sync_report_json(const SyncArgs& args, const SyncRun& run, const std::string& gloo_note) {
  const auto& rows = run.rows;
  Json versions = Json::array();
  bool exact = !rows.empty();
  std::vector<double> speedups_dense, speedups_gloo;
  for (size_t step = 0; step < rows.size(); ++step) {
    const VersionRow& r = rows[step];
    Json row = r.to_json();
    row["step"] = step;  // 0: the first (full) version; then one per training step
    versions.push_back(std::move(row));
    exact = exact && r.exact.value_or(false) && r.dense_exact.value_or(true) && r.gloo_exact.value_or(true);
    if (!r.full && r.dense_seconds) speedups_dense.push_back(*r.dense_seconds / r.report.seconds);
    if (!r.full && r.gloo_seconds) speedups_gloo.push_back(*r.gloo_seconds / r.report.seconds);
  }
  // Full versions: the first one (cold) against the dense baselines of the same run (warm).
  Json dense_syncs = Json::array();
  std::optional<double> best_dense;
  for (const auto& r : run.dense_rows) {
    dense_syncs.push_back(r.to_json());
    if (!best_dense || r.report.seconds < *best_dense) best_dense = r.report.seconds;
  }
  Json first_full;
  if (!rows.empty() && rows.front().full) {
    const auto& f = rows.front();
    first_full = {{"seconds", f.report.seconds},
                  {"vs_best_dense", best_dense && *best_dense > 0 ? Json(f.report.seconds / *best_dense) : Json()},
                  {"vs_lower_bound", f.lower_bound_seconds && *f.lower_bound_seconds > 0
                                         ? Json(f.report.seconds / *f.lower_bound_seconds)
                                         : Json()}};
  }
  return Json{{"mode", args.netns ? "netns" : "loopback"},
              {"consumers", args.consumers},
              {"rails", args.rails},
              {"transport", run.transport},
              {"protection", args.trust.protection},
              {"device", args.device},
              {"rail_rate", args.netns ? Json(args.rail_rate) : Json()},
              {"elements", args.elements},
              {"lr", args.lr},
              {"value_codec", args.value_codec},
              {"link_rate_bytes_per_second", run.link_rate},
              {"gloo", gloo_note},
              {"versions", versions},
              {"dense_syncs", dense_syncs},
              {"first_full", first_full},
              {"all_exact", exact},
              {"median_speedup_vs_dense", speedups_dense.empty() ? Json() : Json(median(speedups_dense))},
              {"median_speedup_vs_gloo", speedups_gloo.empty() ? Json() : Json(median(speedups_gloo))}};
}

void print_sync_table(const Json& report) {
  fmt::print("deltacast-bench sync: 1 producer -> {} consumers over {} {} rail(s), {} bf16 elements ({}) in {} memory\n",
             report["consumers"].get<int>(), report["rails"].get<int>(), report["mode"].get<std::string>(),
             report["elements"].get<uint64_t>(), human_bytes(2.0 * report["elements"].get<double>()),
             report["device"].get<std::string>() == "cuda" ? "GPU" : "host");
  fmt::print("  {:>4} {:>7} {:>6} {:>8} {:>10} {:>8} {:>23} {:>8} {:>8} {:>8} {:>8} {:>7}\n", "step", "version", "kind",
             "changed", "wire", "seconds", "(encode / wire / apply)", "GB/s", "dense s", "gloo s", "x dense", "exact");
  for (const auto& v : report["versions"]) {
    const auto number = [&](const char* key, const char* format) -> std::string {
      return v[key].is_null() ? "-" : fmt::format(fmt::runtime(format), v[key].get<double>());
    };
    fmt::print("  {:>4} {:>7} {:>6} {:>7.3f}% {:>10} {:>8.3f} {:>7.3f} / {:>6.3f} / {:>6.3f} {:>8.2f} {:>8} {:>8} {:>8} {:>7}\n",
               v["step"].get<uint64_t>(), v["version"].get<uint64_t>(), v["full"].get<bool>() ? "full" : "delta",
               100 * v["density"].get<double>(), human_bytes(v["wire_bytes"].get<double>()), v["seconds"].get<double>(),
               v["encode_seconds"].get<double>(), v["wire_seconds"].get<double>(), v["apply_seconds"].get<double>(),
               v["effective_gbps"].get<double>(), number("dense_seconds", "{:.3f}"), number("gloo_seconds", "{:.3f}"),
               number("speedup_vs_dense", "{:.1f}x"), v["exact"].is_null() ? "-" : v["exact"].get<bool>() ? "yes" : "NO");
  }
  if (!report["dense_syncs"].empty()) {
    // Without this a reader sees versions 1, 2, 4, 6... and wonders what happened to the others.
    fmt::print("  (versions count every publish: each step's dense baseline is published as a version of its own,\n"
               "   right after the step's delta, so the steps' versions go up by two; --no-dense skips them)\n");
  }
  fmt::print("  link rate per consumer (fastest full sync): {}/s; gloo baseline: {}\n",
             human_bytes(report["link_rate_bytes_per_second"].get<double>()), report["gloo"].get<std::string>());
  if (const Json& f = report["first_full"]; !f.is_null()) {
    const auto ratio = [&](const char* key) {
      return f[key].is_null() ? std::string("-") : fmt::format("{:.2f}x", f[key].get<double>());
    };
    fmt::print("  first (full) version: {:.3f} s = {} the best later dense sync, {} the lower bound\n",
               f["seconds"].get<double>(), ratio("vs_best_dense"), ratio("vs_lower_bound"));
  }
  fmt::print("  every version bit-exact on every consumer: {}\n", report["all_exact"].get<bool>() ? "yes" : "NO");
}

int run_consumer_role(const SyncArgs& args) {
  if (args.die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);
  stop_on_signals();
  const auto fail = [](const Status& s) {
    emit({{"event", "error"}, {"error", s.to_string()}});
    return 1;
  };
  auto manifest = sync_manifest(args.elements);
  if (!manifest.ok()) return fail(manifest.status());
  auto coordinators = parse_endpoints(args.connect);
  if (!coordinators.ok()) return fail(coordinators.status());
  std::vector<std::string> rail_texts = args.rail_addresses;
  if (rail_texts.empty()) rail_texts.push_back("127.0.0.1");
  auto rails = parse_endpoints(rail_texts);
  if (!rails.ok()) return fail(rails.status());
  // The rollout's weights: resident host tensors, or (--device cuda) tensors on GPU 0.
  std::optional<ResidentTensors> host_tensors;
  std::unique_ptr<DeviceTensors> gpu_tensors;
  std::vector<TensorView> views;
  if (args.device == "cuda") {
    auto allocated = DeviceTensors::allocate(manifest->tensors(), 0);
    if (!allocated.ok()) return fail(allocated.status());
    gpu_tensors = std::move(allocated).value();
    views.assign(gpu_tensors->views().begin(), gpu_tensors->views().end());
  } else {
    ThreadPool pool(args.threads);
    host_tensors.emplace(manifest->tensors(), pool);
    views = host_tensors->views;
  }
  ConsumerOptions options;
  options.coordinators = *coordinators;
  options.trust = trust_of(args.trust);
  options.rails = *rails;
  options.name = args.name.empty() ? fmt::format("consumer-{}", getpid()) : args.name;
  options.node = args.node;
  options.site = args.site;
  options.threads = args.threads;
  options.transport = args.transport;
  if (args.metrics_port >= 0) options.metrics = Endpoint{"0.0.0.0", static_cast<uint16_t>(args.metrics_port)};
  auto consumer = Consumer::create(*manifest, views, options);
  if (!consumer.ok()) return fail(consumer.status());
  Consumer& c = **consumer;
  // With --hash-commits every commit reports the model it left (hashed before the next commit can
  // start: commits run one at a time and this runs inside one), for the soak to check.
  Status started = c.start(Millis(static_cast<int64_t>(args.timeout_seconds * 1000)), [&c, &args](uint64_t version) {
    Json event = {{"event", "committed"}, {"version", version}};
    if (args.hash_commits) {
      event["epoch"] = c.state().held_epoch;
      event["model_hash"] = c.model_hash_now();
    }
    emit(event);
  });
  if (c.state().refused) {
    emit({{"event", "refused"}, {"code", std::string(status_code_name(started.code()))}, {"reason", started.message()}});
    c.close();
    return 3;
  }
  bool connected = false;
  uint32_t joined_as = 0;
  while (!g_stop) {
    const ConsumerState state = c.state();
    // A rejoin between two looks (lost and back within 20 ms) still shows: it has a new id.
    if (state.connected != connected || (state.connected && state.id != joined_as)) {
      connected = state.connected;
      if (connected) {
        joined_as = state.id;
        emit({{"event", "joined"},
              {"id", state.id},
              {"epoch", state.epoch},
              {"version", state.version},
              {"transport", std::string(c.transport())}});
      } else {
        const Consumer::HeldModel held = c.held_model();
        emit({{"event", "producer_lost"},
              {"version", held.version},
              {"epoch", held.epoch},
              {"model_hash", held.hash},
              {"error", state.last_error.message()}});
      }
    }
    std::this_thread::sleep_for(Millis(20));
  }
  const Consumer::HeldModel held = c.held_model();
  c.close();
  emit({{"event", "exit"}, {"version", held.version}, {"epoch", held.epoch}, {"model_hash", held.hash}});
  return 0;
}

namespace {

Json check_json(const CheckReport& report) {
  Json members = Json::array();
  for (const auto& m : report.members) {
    members.push_back({{"id", m.id}, {"name", m.name}, {"answered", m.answered}, {"held", m.held},
                       {"model_hash", m.hash}, {"exact", m.exact}});
  }
  return {{"event", "checked"}, {"version", report.version}, {"expected_hash", report.expected_hash},
          {"all_exact", report.all_exact()}, {"members", members}};
}

// One command of the producer role; returns false on quit.
bool run_command(SyncProducer& sync, const std::string& line) {
  std::stringstream in(line);
  std::string command, argument;
  in >> command >> argument;
  double seconds = 60;
  in >> seconds;
  const Millis timeout(static_cast<int64_t>(seconds * 1000));
  Producer& p = sync.producer();
  if (command == "quit" || command == "exit") return false;
  if (command == "members") {
    const size_t count = argument.empty() ? 1 : std::stoul(argument);
    const Status s = p.wait_members(count, timeout);
    emit({{"event", "members"}, {"ok", s.ok()}, {"count", p.stats().members.size()}, {"error", s.message()}});
  } else if (command == "publish" || command == "republish") {
    // publish [full | LR]: a step of the trace (at learning rate LR from now on), then a version.
    if (!argument.empty() && argument != "full") {
      if (Status s = sync.trace().set_lr(std::stod(argument)); !s.ok()) {
        emit({{"event", "error"}, {"error", s.to_string()}});
        return true;
      }
    }
    if (command == "publish") sync.trace().step();
    auto v = p.publish(command == "republish" || argument == "full");
    if (v.ok()) {
      emit({{"event", "published"}, {"version", *v}, {"full", p.report(*v)->full}});
    } else {
      emit({{"event", "error"}, {"error", v.status().to_string()}});
    }
  } else if (command == "wait") {
    const uint64_t version = std::stoull(argument);
    const Status s = p.wait(version, timeout);
    VersionRow row;
    row.version = version;
    row.report = p.report(version).value_or(VersionReport{});
    row.full = row.report.full;
    emit({{"event", "waited"}, {"version", version}, {"ok", s.ok()}, {"error", s.message()}, {"report", row.to_json()}});
  } else if (command == "hash") {
    // The newest version's hash as the producer published it, for checking what consumers report.
    const uint64_t version = p.stats().version;
    auto hash = p.model_hash(version);
    if (hash.ok()) {
      emit({{"event", "hash"}, {"version", version}, {"epoch", p.epoch()}, {"model_hash", *hash}});
    } else {
      emit({{"event", "error"}, {"error", hash.status().to_string()}});
    }
  } else if (command == "check") {
    auto report = p.check(std::stoull(argument), timeout);
    if (report.ok()) {
      emit(check_json(*report));
    } else {
      emit({{"event", "error"}, {"error", report.status().to_string()}});
    }
  } else if (command == "save") {
    // save PATH: the published model's bytes, every tensor in manifest order (what a test needs to
    // look for the model in a capture of the wire).
    std::ofstream out(argument, std::ios::binary | std::ios::trunc);
    uint64_t bytes = 0;
    for (const TensorView& t : sync.trace().published()) {
      out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes()));
      bytes += t.nbytes();
    }
    out.close();
    if (out) {
      emit({{"event", "saved"}, {"path", argument}, {"version", p.stats().version}, {"bytes", bytes}});
    } else {
      emit({{"event", "error"}, {"error", fmt::format("save: cannot write '{}'", argument)}});
    }
  } else if (command == "stats") {
    const ProducerStats stats = p.stats();
    Json members = Json::array();
    for (const auto& m : stats.members) {
      members.push_back({{"id", m.id}, {"name", m.name}, {"base", m.base}, {"committed", m.committed},
                         {"slow", stats.rates_of(m.id).slow}, {"rate", stats.rates_of(m.id).known()},
                         {"arrived", m.arrived}});
    }
    emit({{"event", "stats"}, {"version", stats.version}, {"queued", stats.queued}, {"full_syncs", stats.full_syncs},
          {"wire_bytes", stats.wire_bytes}, {"members", members}});
  } else {
    emit({{"event", "error"}, {"error", fmt::format("unknown command '{}'", line)}});
  }
  return true;
}

}  // namespace

int run_producer_role(const SyncArgs& args) {
  if (args.die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);
  const auto fail = [](const Status& s) {
    emit({{"event", "error"}, {"error", s.to_string()}});
    return 1;
  };
  auto listen = parse_endpoint(args.listen.empty() ? "127.0.0.1:0" : args.listen);
  if (!listen.ok()) return fail(listen.status());
  auto rails = parse_endpoints(args.rail_addresses);
  if (!rails.ok()) return fail(rails.status());
  auto sync = SyncProducer::create(args, *listen, *rails, "");
  if (!sync.ok()) return fail(sync.status());
  Producer& p = (*sync)->producer();
  emit({{"event", "listening"}, {"address", p.address().to_string()}, {"epoch", p.epoch()},
        {"transport", std::string(p.transport())},
        {"tensors", (*sync)->trace().manifest().size()}, {"bytes", (*sync)->trace().manifest().total_bytes()}});
  if (args.commands) {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      try {
        if (!run_command(**sync, line)) break;
      } catch (const std::exception& e) {
        emit({{"event", "error"}, {"error", fmt::format("bad command '{}': {}", line, e.what())}});
      }
    }
    p.close();
    return 0;
  }
  Progress progress(!args.json);
  if (Status s = p.wait_members(static_cast<size_t>(args.consumers), Millis(static_cast<int64_t>(args.timeout_seconds * 1000)));
      !s.ok()) {
    return fail(s);
  }
  auto run = run_versions(**sync, args, nullptr, progress);
  progress.finish();
  if (!run.ok()) return fail(run.status());
  const Json report = sync_report_json(args, *run, "not run by --role producer");
  if (args.json) {
    fmt::print("{}\n", report.dump());
  } else {
    print_sync_table(report);
  }
  return report["all_exact"].get<bool>() ? 0 : 1;
}

}  // namespace deltacast::bench
