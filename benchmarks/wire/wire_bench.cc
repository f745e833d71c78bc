// deltacast-bench wire: one transfer (or several trials) sprayed over several
// rails (TCP, or RDMA with --transport rdma), with the plain-stream baseline
// (TCP) measured in the same run, and
// optional faults (a rail cut and restored, a rail throttled) on namespace
// rails. Sender and receiver run in one process (loopback rails by default,
// --netns for two namespaces joined by shaped veth rails) or as separate
// processes (--role recv / --role send) placed by hand.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <tuple>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_commands.h"
#include "cli/bench_util.h"
#include "broadcast/transport/sprayer.h"
#include "broadcast/transport/staging.h"
#include "broadcast/transport/tcp/channel.h"
#include "broadcast/transport/tcp/listener.h"
#include "broadcast/transport/transport_select.h"
#include "core/aligned_buffer.h"
#include "core/hash.h"
#include "core/trust/aes_gcm.h"
#include "cli/plot.h"
#include "cli/trust_options.h"
#include "testbed/netns_testbed.h"
#include "wire/wire_metrics.h"

namespace deltacast::bench {

namespace {

struct WireArgs {
  std::string plot;  // role both: draw the last trial's rails over time into this PNG (plot_wire.py)
  std::string role = "both";
  std::string transport = "tcp";
  int rails = 3;
  uint64_t bytes = 512ull << 20;
  std::string slice = "auto";
  std::string mode = "spray";
  std::string checksums = "payload";
  std::string leaf_tags = "payload";
  std::string piece_helpers = "auto";
  bool netns = false;
  std::vector<std::string> rail_rates;
  std::vector<std::string> listen;
  std::vector<std::string> rail_specs;
  TrustArgs trust;
  int trials = 0;  // 0: 5 with both ends in this process, 1 with --role send/recv (both ends must agree)
  int connect_timeout_ms = 5000;
  double baseline_seconds = 0.5;
  int fail_rail = -1;
  std::string fail_command;
  int fail_at_ms = 300;
  int restore_after_ms = -1;
  int throttle_rail = -1;
  std::string throttle_to = "50mbit";
  int throttle_at_ms = 300;
  uint64_t seed = 1;
  bool json = false;
};

// --piece-helpers was checked to be one of the three when the command line was parsed.
PieceHelperMode piece_helper_mode(const WireArgs& args) {
  return parse_piece_helper_mode(args.piece_helpers).value_or(PieceHelperMode::kAuto);
}

// The payload both ends can regenerate from the seed (the receiver of --role recv checks it).
// Returns its content-hash leaf digests (core/hash.h), each leaf hashed right after it was
// written, as a producer hashes a version while it builds it.
std::vector<uint64_t> fill(uint8_t* out, uint64_t bytes, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull;
  const auto next = [&x] {  // splitmix64: fast, and both ends regenerate the same bytes
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint64_t> leaves(content_hash_leaf_count(bytes));
  for (size_t leaf = 0; leaf < leaves.size(); ++leaf) {
    const uint64_t at = leaf * kHashLeafBytes;
    const uint64_t end = std::min<uint64_t>(bytes, at + kHashLeafBytes);
    uint64_t i = at;  // leaves are whole 8-byte words but the last
    for (; i + 8 <= end; i += 8) {
      const uint64_t r = next();
      std::memcpy(out + i, &r, 8);
    }
    for (; i < end; ++i) out[i] = static_cast<uint8_t>(next());
    leaves[leaf] = xxh3_64(out + at, end - at);
  }
  return leaves;
}

double rate_to_bps(const std::string& rate) {
  const double v = std::atof(rate.c_str());
  if (rate.find("gbit") != std::string::npos) return v * 1e9;
  if (rate.find("mbit") != std::string::npos) return v * 1e6;
  if (rate.find("kbit") != std::string::npos) return v * 1e3;
  return v;
}

struct Setup {
  std::unique_ptr<NetnsTestbed> testbed;
  StagingArea staging{[] {
    StagingOptions o;
    o.record_arrival_times = true;
    return o;
  }()};
  TransportChoice transport;
  std::unique_ptr<Listener> listener;
  std::vector<Channel*> channels;  // owned by the sprayer
  std::unique_ptr<Sprayer> sprayer;
  std::vector<std::string> rail_names;
  AlignedBuffer receive;  // staging reused by every trial, touched once before timing (as a consumer's is)
};

Result<SprayOptions> spray_options(const WireArgs& args, const Transport& transport) {
  SprayOptions o;
  DC_ASSIGN_OR_RETURN(o.mode, parse_spray_mode(args.mode));
  const uint32_t largest = transport.capabilities().max_slice_bytes;
  o.max_slice_bytes = std::min(o.max_slice_bytes, largest);
  if (args.slice != "auto") {
    char* end = nullptr;
    const uint64_t v = std::strtoull(args.slice.c_str(), &end, 10);
    const uint64_t unit = *end == 'k' || *end == 'K' ? 1024 : *end == 'm' || *end == 'M' ? 1 << 20 : 1;
    if (v == 0 || v * unit > largest) {
      return invalid_argument("--slice '{}' is not a size up to the {} transport's {} bytes", args.slice,
                              transport.name(), largest);
    }
    o.slice_bytes = static_cast<uint32_t>(v * unit);
  }
  return o;
}


// Channels for the sender side; rails as parsed or built.
Status connect_rails(const WireArgs& args, const std::vector<RailSpec>& rails, const std::string& netns, Setup& s) {
  std::vector<std::unique_ptr<Channel>> channels;
  for (size_t r = 0; r < rails.size(); ++r) {
    ChannelOptions options;
    options.trust = trust_of(args.trust);
    options.rail_index = static_cast<uint32_t>(r);
    options.piece_helper = piece_helper_mode(args);
    options.netns = netns;
    DC_ASSIGN_OR_RETURN(auto channel, s.transport.transport->connect(rails[r], options));
    s.channels.push_back(channel.get());
    s.rail_names.push_back(rails[r].name);
    channels.push_back(std::move(channel));
  }
  for (auto* c : s.channels) {
    if (!wait_ready(*c, Millis(args.connect_timeout_ms))) {
      return unavailable("rail {} did not connect over {}", c->rail().to_string(), s.transport.transport->name());
    }
  }
  DC_ASSIGN_OR_RETURN(SprayOptions options, spray_options(args, *s.transport.transport));
  s.sprayer = std::make_unique<Sprayer>(std::move(channels), options);
  return Status();
}

// One plain TCP stream per rail, all at once, for baseline_seconds: the rails' combined rate.
// Over another transport there is no plain stream to compare with (empty).
std::vector<double> baseline_streams(Setup& s, double seconds) {
  std::vector<tcp::TcpChannel*> streams;
  for (Channel* c : s.channels) streams.push_back(dynamic_cast<tcp::TcpChannel*>(c));
  if (seconds <= 0 || std::count(streams.begin(), streams.end(), nullptr) > 0) return {};
  std::vector<double> gbps(s.channels.size(), 0);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < s.channels.size(); ++r) {
    threads.emplace_back([&, r] {
      auto sent = streams[r]->stream_for(Millis(static_cast<int64_t>(seconds * 1000)));
      if (sent.ok()) gbps[r] = 8.0 * static_cast<double>(*sent) / seconds / 1e9;
    });
  }
  for (auto& t : threads) t.join();
  std::this_thread::sleep_for(Millis(100));  // let the receivers drain what is still queued
  return gbps;
}

nlohmann::json run_trial(const WireArgs& args, Setup& s, uint64_t id, std::span<const uint8_t> data,
                         std::span<const uint64_t> leaves, const std::shared_ptr<const trust::LeafTags>& leaf_tags) {
  std::vector<SprayEvent> events;
  std::mutex events_mu;
  s.sprayer->set_observer([&](const SprayEvent& e) {
    std::lock_guard<std::mutex> lock(events_mu);
    events.push_back(e);
  });
  const Status expected = s.staging.expect(id, data.size(), 0, s.receive.size() >= data.size() ? s.receive.data() : nullptr);
  if (!expected.ok()) return {{"error", expected.to_string()}};
  const TimePoint start = SteadyClock::now();
  TimePoint cut{}, restored{}, throttled{};
  std::thread faults([&] {
    if (!args.fail_command.empty()) {  // a fault of the caller's own, on hosts placed by hand
      std::this_thread::sleep_until(start + Millis(args.fail_at_ms));
      const int rc = std::system(args.fail_command.c_str());
      if (rc != 0) fmt::print(stderr, "deltacast-bench wire: --fail-command exited {}\n", rc);
      return;
    }
    if (!s.testbed) return;
    if (args.fail_rail >= 0) {
      std::this_thread::sleep_until(start + Millis(args.fail_at_ms));
      (void)s.testbed->set_link(static_cast<size_t>(args.fail_rail), false);
      cut = SteadyClock::now();
      if (args.restore_after_ms >= 0) {
        std::this_thread::sleep_until(start + Millis(args.fail_at_ms + args.restore_after_ms));
        (void)s.testbed->set_link(static_cast<size_t>(args.fail_rail), true);
        restored = SteadyClock::now();
      }
    }
    if (args.throttle_rail >= 0) {
      std::this_thread::sleep_until(start + Millis(args.throttle_at_ms));
      (void)s.testbed->set_rate(static_cast<size_t>(args.throttle_rail), args.throttle_to);
      throttled = SteadyClock::now();
    }
  });
  // --checksums payload: slices go out with checksums derived from the leaf digests taken as the
  // payload was made (as the engine's producer sends); channel: each channel hashes as it sends.
  // Leaf tags likewise, where the payload was tagged as it was made (authenticated).
  auto result = s.sprayer->send(id, data.data(), data.size(),
                                args.checksums == "payload" ? leaves : std::span<const uint64_t>{}, leaf_tags);
  const TimePoint end = SteadyClock::now();
  faults.join();
  s.sprayer->set_observer(nullptr);
  nlohmann::json trial;
  if (!result.ok()) {
    trial["error"] = result.status().to_string();
    return trial;
  }
  // With the receiver in this process its bytes are checked here; a --role send process only
  // knows every slice was acknowledged (its --role recv peer checks the bytes).
  bool verified = true;
  if (s.listener) {
    (void)s.staging.wait(id, Millis(2000));
    const auto received = s.staging.bytes(id);
    verified = received.size() == data.size() &&
               content_hash(received.data(), received.size()) == content_hash(data.data(), data.size());
  }
  const TransferProgress progress = s.staging.progress(id);
  const auto telemetry = s.sprayer->telemetry();
  std::vector<uint64_t> rail_bytes(telemetry.size(), 0);
  for (const auto& e : events) {
    if (e.kind == SprayEvent::kAcked) rail_bytes[e.rail] += e.bytes;
  }
  nlohmann::json per_rail = nlohmann::json::array();
  for (size_t r = 0; r < telemetry.size(); ++r) {
    per_rail.push_back({{"rail", s.rail_names[r]},
                        {"gbps", 8.0 * static_cast<double>(rail_bytes[r]) / result->seconds / 1e9},
                        {"bytes", rail_bytes[r]},
                        {"resent_slices", telemetry[r].resent_slices},
                        {"timeouts", telemetry[r].timeouts},
                        {"estimate_gbps", 8.0 * telemetry[r].bandwidth_bps / 1e9},
                        {"state", std::string(rail_state_name(telemetry[r].state))}});
  }
  trial = {{"transfer", id},
           {"seconds", result->seconds},
           {"aggregate_gbps", 8.0 * static_cast<double>(data.size()) / result->seconds / 1e9},
           {"slice_bytes", result->slice_bytes},
           {"slices", result->slices},
           {"resent_slices", result->resent_slices},
           {"duplicates", progress.duplicates},
           {"max_stall_ms", max_prefix_stall_ms(progress.arrival, progress.started)},
           {"max_gap_ms", max_arrival_gap_ms(progress.arrival, progress.started)},
           {"per_rail", per_rail},
           {"verified", verified},
           {"checked", s.listener ? "content hash of the received bytes" : "every slice acknowledged"}};
  // Each rail's rate over the transfer (about 100 bins), with the faults injected into it.
  const auto bin = std::max<SteadyClock::duration>(Millis(1), (end - start) / 100);
  nlohmann::json faults_at = nlohmann::json::array();
  for (const auto& [what, rail, at] : {std::tuple{"cut", args.fail_rail, cut}, std::tuple{"restored", args.fail_rail, restored},
                                       std::tuple{"throttled", args.throttle_rail, throttled}}) {
    if (at != TimePoint{}) {
      faults_at.push_back({{"kind", what}, {"rail", rail}, {"at_ms", std::chrono::duration<double, std::milli>(at - start).count()}});
    }
  }
  trial["timeline"] = {{"bin_ms", std::chrono::duration<double, std::milli>(bin).count()},
                       {"rails", s.rail_names},
                       {"gbps", rail_timeline(events, telemetry.size(), start, end, bin)},
                       {"faults", faults_at}};
  if (restored != TimePoint{}) {
    auto back = first_ack_after_ms(events, static_cast<uint32_t>(args.fail_rail), restored);
    trial["rail_back_ms"] = back ? nlohmann::json(*back) : nlohmann::json();
  }
  if (throttled != TimePoint{}) {
    trial["throttle_share_before"] = send_share(events, static_cast<uint32_t>(args.throttle_rail), start, throttled);
    trial["throttle_share_after_1s"] =
        send_share(events, static_cast<uint32_t>(args.throttle_rail), throttled + Millis(1000), end);
  }
  s.staging.forget(id);
  return trial;
}

double median_of(const nlohmann::json& trials, const char* key) {
  std::vector<double> v;
  for (const auto& t : trials) {
    if (t.contains(key) && t[key].is_number()) v.push_back(t[key].get<double>());
  }
  return median(v);
}

void print_table(const nlohmann::json& report) {
  fmt::print("deltacast-bench wire: {} rails, {} per trial, mode {}, {}\n", report["rails"].get<int>(),
             human_bytes(report["bytes"].get<double>()), report["mode"].get<std::string>(),
             report["netns"].get<bool>() ? "namespaces" : "loopback");
  if (!report["transport_fallback"].is_null()) {
    fmt::print("  transport: {} ({})\n", report["transport"].get<std::string>(),
               report["transport_fallback"].get<std::string>());
  }
  fmt::print("  baseline (one plain TCP stream per rail, together, before each trial): median {:.2f} Gbit/s\n",
             report["baseline_stream_gbps"].get<double>());
  for (const auto& t : report["trials"]) {
    if (t.contains("error")) {
      fmt::print("  trial: ERROR {}\n", t["error"].get<std::string>());
      continue;
    }
    fmt::print("  trial {}: {:.2f} Gbit/s ({:.2f} x the baseline before it) in {:.2f} s, {} slices of {}, {} re-sent, "
               "max stall {:.1f} ms, verified {}\n",
               t["transfer"].get<uint64_t>(), t["aggregate_gbps"].get<double>(), t.value("ratio_to_baseline", 0.0),
               t["seconds"].get<double>(),
               t["slices"].get<uint32_t>(), human_bytes(t["slice_bytes"].get<double>()),
               t["resent_slices"].get<uint64_t>(), t["max_stall_ms"].get<double>(), t["verified"].get<bool>());
    for (const auto& r : t["per_rail"]) {
      fmt::print("      {:<8} {:6.2f} Gbit/s  {:>10}  re-sent {:>4}  {}\n", r["rail"].get<std::string>(),
                 r["gbps"].get<double>(), human_bytes(r["bytes"].get<double>()), r["resent_slices"].get<uint64_t>(),
                 r["state"].get<std::string>());
    }
    if (t.contains("rail_back_ms") && !t["rail_back_ms"].is_null()) {
      fmt::print("      restored rail carried data again after {:.0f} ms\n", t["rail_back_ms"].get<double>());
    }
    if (t.contains("throttle_share_after_1s")) {
      fmt::print("      throttled rail's share: {:.1f}% before, {:.1f}% from 1 s after\n",
                 100 * t["throttle_share_before"].get<double>(), 100 * t["throttle_share_after_1s"].get<double>());
    }
  }
  fmt::print("  median {:.2f} Gbit/s; median ratio to the baseline before each trial {:.2f}; every transfer verified: {}\n",
             report["aggregate_gbps"].get<double>(), report["ratio_to_baseline"].get<double>(),
             report["verified"].get<bool>() ? "yes" : "NO");
}

int run_sender_side(const WireArgs& args, Setup& s, std::vector<RailSpec> rails, const std::string& netns) {
  if (Status st = connect_rails(args, rails, netns, s); !st.ok()) return command_failed("wire", st);
  AlignedBuffer payload(args.bytes);
  const std::vector<uint64_t> leaves = fill(payload.data(), args.bytes, args.seed);
  const std::span<const uint8_t> data(payload.data(), args.bytes);
  // Authenticated, the engine's producer tags the leaves of each version's bytes once, as it makes
  // them, and every hop sends those tags instead of tagging the payload: so here, with the payload.
  std::shared_ptr<const trust::LeafTags> leaf_tags;
  double leaf_tags_seconds = 0;
  if (args.leaf_tags == "payload" && args.checksums == "payload" && args.trust.protection == "authenticated") {
    const trust::Trust trust = trust_of(args.trust);
    ThreadPool pool;
    const auto started = SteadyClock::now();
    auto made = trust::make_leaf_tags(trust.secret, payload.data(), args.bytes, pool);
    leaf_tags_seconds = std::chrono::duration<double>(SteadyClock::now() - started).count();
    if (!made.ok()) return command_failed("wire", made.status());
    leaf_tags = std::make_shared<const trust::LeafTags>(std::move(made).value());
    fmt::print(stderr, "leaf tags made with the payload: {:.1f} ms ({:.1f} GB/s on {} threads)\n",
               leaf_tags_seconds * 1e3, static_cast<double>(args.bytes) / leaf_tags_seconds / 1e9, pool.size());
  }
  if (s.listener) {
    s.receive = AlignedBuffer(args.bytes);
    std::memset(s.receive.data(), 0, args.bytes);
  }
  nlohmann::json trials = nlohmann::json::array();
  bool verified = true;
  // A --role recv peer may outlive this process and refuses ids it already finished, so a separate
  // sender numbers its transfers from the wall clock (later processes get larger ids).
  const uint64_t first_id =
      s.listener ? 1
                 : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()) * 128;
  // The baseline runs right before each trial: on a shared, noisy machine a ratio means something
  // only between measurements taken close together, so the report's ratio is the median of the
  // trials' own ratios.
  std::vector<std::vector<double>> baselines;  // per trial, per rail
  std::vector<double> baseline_sums;
  for (int t = 0; t < args.trials; ++t) {
    const std::vector<double> before = baseline_streams(s, args.baseline_seconds);
    const double before_sum = std::accumulate(before.begin(), before.end(), 0.0);
    nlohmann::json trial = run_trial(args, s, first_id + static_cast<uint64_t>(t), data, leaves, leaf_tags);
    if (before_sum > 0 && !trial.contains("error")) {
      trial["baseline_gbps"] = before_sum;
      trial["ratio_to_baseline"] = trial["aggregate_gbps"].get<double>() / before_sum;
      baseline_sums.push_back(before_sum);
      baselines.push_back(before);
    }
    verified = verified && !trial.contains("error") && trial.value("verified", false);
    trials.push_back(trial);
    if (s.testbed) {  // every trial starts with every rail up and at its rate
      for (size_t r = 0; r < rails.size(); ++r) {
        (void)s.testbed->set_link(r, true);
        if (r < args.rail_rates.size() && !args.rail_rates[r].empty()) (void)s.testbed->set_rate(r, args.rail_rates[r]);
      }
    }
  }
  const double baseline_sum = baseline_sums.empty() ? 0.0 : median(baseline_sums);
  nlohmann::json baseline_rails = nlohmann::json::array();  // of the trial whose baseline is the median
  for (size_t t = 0; t < baselines.size(); ++t) {
    if (baseline_sums[t] != baseline_sum && t + 1 < baselines.size()) continue;
    for (double g : baselines[t]) baseline_rails.push_back(g);
    break;
  }
  const double aggregate = median_of(trials, "aggregate_gbps");
  double shaped = 0;
  for (const auto& r : args.rail_rates) shaped += rate_to_bps(r) / 1e9;
  nlohmann::json report = {
      {"role", args.role},
      {"transport", std::string(s.transport.transport->name())},
      {"protection", args.trust.protection},
      {"aes_gcm", std::string(trust::aes_gcm_library_name())},
      {"piece_helpers", use_piece_helper(piece_helper_mode(args))},
      {"transport_fallback", s.transport.fallback.empty() ? nlohmann::json() : nlohmann::json(s.transport.fallback)},
      {"mode", args.mode},
      {"sender_checksums", args.checksums},
      {"leaf_tags", leaf_tags != nullptr},
      {"leaf_tags_seconds", leaf_tags_seconds},
      {"netns", args.netns},
      {"rails", static_cast<int>(rails.size())},
      {"bytes", args.bytes},
      {"aggregate_gbps", aggregate},
      {"baseline_stream_gbps", baseline_sum},
      {"baseline_per_rail_gbps", baseline_rails},
      {"ratio_to_baseline", baseline_sum > 0 ? median_of(trials, "ratio_to_baseline") : 0.0},
      {"shaped_gbps", shaped},
      {"max_stall_ms", median_of(trials, "max_stall_ms")},
      {"per_rail",
       trials.empty() || trials.back().contains("error") ? nlohmann::json::array() : trials.back()["per_rail"]},
      {"trials", trials},
      {"verified", verified}};
  if (args.json) {
    fmt::print("{}\n", report.dump());
  } else {
    print_table(report);
  }
  if (!args.plot.empty()) {
    if (Status p = draw_plot("plot_wire.py", report, args.plot); !p.ok()) {
      fmt::print(stderr, "deltacast-bench wire: --plot: {}\n", p.to_string());
      return 1;
    }
  }
  return verified ? 0 : 1;
}

Result<TransportChoice> choose_transport(const WireArgs& args) {
  DC_ASSIGN_OR_RETURN(TransportChoice choice, open_transport(args.transport, args.trust.protection == "encrypted"));
  if (args.netns && choice.transport->name() == "rdma") {
    return invalid_argument("--netns needs --transport tcp: RDMA devices are not namespace-aware here; run "
                            "--role recv and --role send on RDMA hosts instead");
  }
  return choice;
}

int run_both(const WireArgs& args) {
  Setup s;
  auto transport = choose_transport(args);
  if (!transport.ok()) return command_failed("wire", transport.status());
  s.transport = std::move(transport).value();
  std::vector<RailSpec> rails;
  std::string send_ns, recv_ns;
  std::vector<Endpoint> listen;
  if (args.netns) {
    std::vector<TestbedRail> spec;
    for (int r = 0; r < args.rails; ++r) {
      spec.push_back({"a", "b", static_cast<size_t>(r) < args.rail_rates.size() ? args.rail_rates[r] : ""});
    }
    auto testbed = NetnsTestbed::create({"a", "b"}, spec);
    if (!testbed.ok()) return command_failed("wire", testbed.status());
    s.testbed = std::move(testbed).value();
    send_ns = s.testbed->netns("a");
    recv_ns = s.testbed->netns("b");
    for (int r = 0; r < args.rails; ++r) listen.push_back(s.testbed->address(static_cast<size_t>(r), false));
  } else {
    for (int r = 0; r < args.rails; ++r) listen.push_back({fmt::format("127.0.1.{}", r + 1), 0});
  }
  ListenOptions lo;
  lo.trust = trust_of(args.trust);
  lo.piece_helper = piece_helper_mode(args);
  lo.netns = recv_ns;
  auto listener = s.transport.transport->listen(listen, &s.staging, lo);
  if (!listener.ok()) return command_failed("wire", listener.status());
  s.listener = std::move(listener).value();
  const auto endpoints = s.listener->endpoints();
  for (int r = 0; r < args.rails; ++r) {
    const Endpoint local = args.netns ? s.testbed->address(static_cast<size_t>(r), true)
                                      : Endpoint{fmt::format("127.0.0.{}", r + 1), 0};
    rails.push_back(RailSpec{local, endpoints[static_cast<size_t>(r)], fmt::format("rail{}", r)});
  }
  if ((args.fail_rail >= 0 || args.throttle_rail >= 0) && !args.netns) {
    return command_failed("wire", invalid_argument("--fail-rail and --throttle-rail need --netns (they change namespace links)"));
  }
  return run_sender_side(args, s, rails, send_ns);
}

int run_send(const WireArgs& args) {
  std::vector<RailSpec> rails;
  for (size_t r = 0; r < args.rail_specs.size(); ++r) {
    auto rail = parse_rail(args.rail_specs[r], 0);
    if (!rail.ok()) return command_failed("wire", rail.status());
    rail->name = fmt::format("rail{}", r);
    rails.push_back(*rail);
  }
  if (rails.empty()) return command_failed("wire", invalid_argument("--role send needs at least one --rail LOCAL=REMOTE:PORT"));
  Setup s;
  auto transport = choose_transport(args);
  if (!transport.ok()) return command_failed("wire", transport.status());
  s.transport = std::move(transport).value();
  return run_sender_side(args, s, rails, "");
}

int run_recv(const WireArgs& args) {
  std::vector<Endpoint> listen;
  for (const auto& text : args.listen) {
    auto e = parse_endpoint(text, 0);
    if (!e.ok()) return command_failed("wire", e.status());
    listen.push_back(*e);
  }
  if (listen.empty()) return command_failed("wire", invalid_argument("--role recv needs --listen ADDR[:PORT][,ADDR...]"));
  StagingOptions so;
  so.auto_accept_bytes = args.bytes;
  so.record_arrival_times = true;
  StagingArea staging(so);
  ListenOptions lo;
  lo.trust = trust_of(args.trust);
  lo.piece_helper = piece_helper_mode(args);
  auto chosen = choose_transport(args);
  if (!chosen.ok()) return command_failed("wire", chosen.status());
  Transport& transport = *chosen->transport;
  auto listener = transport.listen(listen, &staging, lo);
  if (!listener.ok()) return command_failed("wire", listener.status());
  std::string bound;
  for (const auto& e : (*listener)->endpoints()) bound += (bound.empty() ? "" : ",") + e.to_string();
  fmt::print(stderr, "deltacast-bench wire: receiving on {} over {}\n", bound, transport.name());
  std::vector<uint8_t> expected;
  bool all_verified = true;
  for (int t = 0; t < args.trials; ++t) {
    auto id = staging.wait_any(Millis(600000));
    if (!id.ok()) return command_failed("wire", id.status());
    const auto received = staging.bytes(*id);
    expected.resize(received.size());
    (void)fill(expected.data(), expected.size(), args.seed);
    const bool verified = std::equal(received.begin(), received.end(), expected.begin());
    all_verified = all_verified && verified;
    const TransferProgress p = staging.progress(*id);
    const TimePoint first = p.arrival.empty() ? p.started : *std::min_element(p.arrival.begin(), p.arrival.end());
    const TimePoint last = p.arrival.empty() ? p.started : *std::max_element(p.arrival.begin(), p.arrival.end());
    const double seconds = std::chrono::duration<double>(last - first).count();
    nlohmann::json report = {{"role", "recv"},
                             {"transport", std::string(transport.name())},
                             {"transfer", *id},
                             {"bytes", received.size()},
                             {"seconds", seconds},
                             {"aggregate_gbps", seconds > 0 ? 8.0 * static_cast<double>(received.size()) / seconds / 1e9 : 0.0},
                             {"duplicates", p.duplicates},
                             {"max_stall_ms", max_prefix_stall_ms(p.arrival, first)},
                             {"verified", verified}};
    fmt::print("{}\n", args.json ? report.dump() : report.dump(2));
    std::fflush(stdout);
    staging.forget(*id);
  }
  return all_verified ? 0 : 1;
}

}  // namespace

void add_wire_command(CLI::App& app) {
  auto args = std::make_shared<WireArgs>();
  CLI::App* cmd = app.add_subcommand("wire", "Spray a transfer over several rails, against plain TCP streams");
  cmd->add_option("--role", args->role, "both (one process), send or recv")->capture_default_str()->check(CLI::IsMember({"both", "send", "recv"}));
  cmd->add_option("--transport", args->transport, "tcp, rdma (TCP where there is no RDMA device, saying so) or auto")
      ->capture_default_str()->check(CLI::IsMember({"tcp", "rdma", "auto"}));
  cmd->add_option("--rails", args->rails, "Rails (role both)")->capture_default_str()->check(CLI::Range(1, 16));
  cmd->add_option("--bytes", args->bytes, "Bytes per transfer (recv: the most it accepts)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--slice", args->slice, "Slice size: auto (bandwidth x latency) or a size like 256k")->capture_default_str();
  cmd->add_option("--checksums", args->checksums,
                  "payload: slice checksums from the leaf digests taken as the payload was made (as the engine "
                  "sends); channel: each channel hashes its slices as it sends them")
      ->capture_default_str()
      ->check(CLI::IsMember({"payload", "channel"}));
  cmd->add_option("--leaf-tags", args->leaf_tags,
                  "payload: an authenticated payload's leaves are tagged as it is made (as the engine's producer "
                  "does), and each rail tags only its frames' headers; off: each rail tags every payload it sends")
      ->capture_default_str()
      ->check(CLI::IsMember({"payload", "off"}));
  cmd->add_option("--piece-helpers", args->piece_helpers,
                  "Tag, encrypt and hash each connection's payloads on a helper thread beside it: on, off, or "
                  "auto (where the machine has 16 cores or more)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--mode", args->mode, "spray or roundrobin (the striping baseline)")->capture_default_str()->check(CLI::IsMember({"spray", "roundrobin"}));
  cmd->add_flag("--netns", args->netns, "Two network namespaces joined by veth rails (needs root)");
  cmd->add_option("--rail-rate", args->rail_rates, "tbf rate per rail with --netns, e.g. 1gbit,1gbit,200mbit")->delimiter(',');
  cmd->add_option("--listen", args->listen, "recv: addresses to listen on, ADDR[:PORT]")->delimiter(',');
  cmd->add_option("--rail", args->rail_specs, "send: a rail LOCAL=REMOTE:PORT (repeat per rail)");
  add_trust_options(cmd, args->trust, "0xdc");
  cmd->add_option("--connect-timeout", args->connect_timeout_ms, "ms to wait for every rail to connect")->capture_default_str();
  cmd->add_option("--trials", args->trials,
                  "Transfers to run, medians reported (default: 5 with --role both, 1 with send/recv)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--baseline-seconds", args->baseline_seconds, "Duration of the plain-stream baseline run before each trial (0: none)")->capture_default_str();
  cmd->add_option("--fail-rail", args->fail_rail, "With --netns: take this rail's link down mid-transfer");
  cmd->add_option("--fail-command", args->fail_command, "Run this shell command --fail-at ms into each transfer "
                  "(a fault on hosts placed by hand, e.g. 'ip link set eth1 down')");
  cmd->add_option("--fail-at", args->fail_at_ms, "... this many ms into the transfer")->capture_default_str();
  cmd->add_option("--restore-after", args->restore_after_ms, "... and bring it back this many ms later");
  cmd->add_option("--throttle-rail", args->throttle_rail, "With --netns: throttle this rail mid-transfer");
  cmd->add_option("--throttle-to", args->throttle_to, "... to this tbf rate")->capture_default_str();
  cmd->add_option("--throttle-at", args->throttle_at_ms, "... this many ms into the transfer")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Payload seed (both ends of --role send/recv must agree)")->capture_default_str();
  cmd->add_flag("--json", args->json, "JSON output");
  cmd->add_option("--plot", args->plot,
                  "Draw each rail's throughput over the last trial, with the faults injected into it, into this "
                  "PNG (matplotlib)");
  cmd->callback([args] {
    // A ratio on this kind of machine means something as a median of several transfers, each
    // against the plain streams measured just before it.
    if (args->trials == 0) args->trials = args->role == "both" ? 5 : 1;
    int rc = 0;
    if (args->role == "recv") {
      rc = run_recv(*args);
    } else if (args->role == "send") {
      rc = run_send(*args);
    } else {
      rc = run_both(*args);
    }
    throw CLI::RuntimeError(rc);
  });
}

}  // namespace deltacast::bench
