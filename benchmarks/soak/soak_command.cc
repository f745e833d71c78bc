// deltacast-bench soak: the engine over a long run with faults. A producer and consumers, each a
// process in its own network namespace on switched, shaped rails, while versions are published
// one after another at mixed densities (now and then a full one) and faults are injected at
// random: rail ports cut and restored, throttled and freed, consumers SIGKILLed and started
// again, and every few minutes the producer SIGKILLed mid-version and started again. Every model
// a consumer reports (each commit, when it loses the producer, at its exit) is checked against
// the producer's hash of that version, and every version must reach every consumer process that
// was up and following the producer (soak_ledger.h judges both from the consumers' reports). It
// ends with every fault undone, one more version, and a check of every consumer.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <random>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/bench_commands.h"
#include "cli/bench_util.h"
#include "soak/soak_cluster.h"
#include "soak/soak_faults.h"
#include "soak/soak_ledger.h"
#include "sync/sync_roles.h"

namespace deltacast::bench {

namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

struct SoakArgs {
  double minutes = 60;
  int consumers = 6;
  int rails = 2;
  std::string rail_rate = "1gbit";
  uint64_t elements = 1 << 24;
  uint64_t seed = 1;
  double fault_every = 8;
  double producer_kill_every = 180;
  double max_gap_ms = 200;
  double round_timeout = 60;
  int port = 7400;
  bool json = false;
  bool verbose = false;
  TrustArgs trust{"0x50a6", "authenticated"};  // authenticated unless asked otherwise, as deployments run
};

// The learning rates versions are published at: from a trickle of changes to a flood.
const char* const kLearningRates[] = {"1e-8", "3e-8", "1e-7", "3e-7", "1e-6", "3e-6", "1e-5"};
constexpr int kFullOneIn = 12;

class Soak {
 public:
  Soak(const SoakArgs& args, NetnsTestbed& testbed);
  ~Soak();
  Json run();

 private:
  // The fault thread: injects until the phase is kUndoing, then undoes every fault (kUndone) and
  // waits for kQuit. Consumers it started die with it (--die-with-parent is PR_SET_PDEATHSIG,
  // which follows the thread that spawned them), so it lives until they are stopped.
  enum class FaultPhase { kInjecting, kUndoing, kUndone, kQuit };
  struct Outcome {
    uint64_t version = 0;
    int exact = 0;  // consumers the producer's check found holding it exactly
  };
  static FaultScheduleOptions schedule_options(const SoakArgs& args);
  double now() const { return seconds_between(start_, Clock::now()); }
  void problem(const std::string& what) { ledger_.problem(fmt::format("[{:.1f} s] {}", now(), what)); }
  void on_event(const std::string& consumer, const Json& event);
  void fault_loop();
  void set_fault_phase(FaultPhase phase);
  void carry_out(const FaultAction& action);
  void log_fault(Json entry);
  Status start_consumer(int i);
  void kill_consumer(int i);
  // A consumer that died without being killed is a problem; with `restart` it is started again.
  void note_crashes(bool restart);
  Status start_producer();
  // Until every consumer that is up has joined the producer now running (by the id it was given).
  Status rejoin_everyone(const std::string& why);
  // One version: published, its hash noted, waited for and checked; with `kill_mid_round` a full
  // version, and the producer is SIGKILLed while its round runs and started again instead.
  Result<Outcome> one_version(bool kill_mid_round);
  // Every fault undone: every consumer joins, takes one more version and holds it exactly.
  Status settle();
  void loop_versions();
  std::string pick_argument();
  void show_progress(bool force);
  Json report(double seconds) const;

  const SoakArgs& args_;
  NetnsTestbed& testbed_;
  const Clock::time_point start_;
  // Before cluster_: the consumers' reader threads report into these until they are reaped.
  SoakLedger ledger_;
  std::mutex joined_mu_;
  std::map<std::string, std::pair<uint64_t, uint32_t>> joined_;  // host -> (epoch, id) of its last join
  SoakCluster cluster_;
  FaultSchedule schedule_;
  std::mt19937_64 versions_rng_;  // densities and pauses
  std::mt19937_64 kills_rng_;     // when the producer is killed, and how far into its round
  Progress progress_;
  Clock::time_point last_progress_{};
  uint64_t epoch_ = 0;
  uint64_t incarnation_ = 0;
  std::optional<double> recovering_since_;
  std::mutex fault_mu_;
  std::condition_variable fault_cv_;
  FaultPhase fault_phase_ = FaultPhase::kInjecting;
  std::thread fault_thread_;
  Json fault_log_ = Json::array();
};

Soak::Soak(const SoakArgs& args, NetnsTestbed& testbed)
    : args_(args),
      testbed_(testbed),
      start_(Clock::now()),
      cluster_(SoakClusterOptions{&testbed, args.consumers, static_cast<uint16_t>(args.port), args.elements,
                                  args.trust, args.verbose},
               [this](const std::string& consumer, const Json& event) { on_event(consumer, event); }),
      schedule_(schedule_options(args)),
      // Each stream its own seed: the faults' times do not depend on how many versions went out.
      versions_rng_(args.seed * 3 + 1),
      kills_rng_(args.seed * 3 + 2),
      progress_(true) {}

Soak::~Soak() {
  // Also when run() ended by an exception: the fault thread must not outlive the soak.
  if (fault_thread_.joinable()) {
    set_fault_phase(FaultPhase::kQuit);
    fault_thread_.join();
  }
}

FaultScheduleOptions Soak::schedule_options(const SoakArgs& args) {
  FaultScheduleOptions o;
  o.hosts = {"p"};
  for (int i = 0; i < args.consumers; ++i) {
    o.hosts.push_back(SoakCluster::consumer_host(i));
    o.consumers.push_back(SoakCluster::consumer_host(i));
  }
  o.planes = static_cast<size_t>(args.rails);
  o.mean_interval = args.fault_every;
  o.max_consumers_down = static_cast<size_t>(std::max(1, args.consumers / 3));
  o.rate = args.rail_rate;
  o.seed = args.seed * 3;
  return o;
}

void Soak::on_event(const std::string& consumer, const Json& event) {
  const std::string name = event.value("event", "");
  const auto held = [&](const char* when) {
    if (!event.contains("model_hash") || !event.contains("epoch")) {
      problem(fmt::format("{}: a '{}' event without its model hash: {}", consumer, name, event.dump()));
      return;
    }
    ledger_.held(consumer, when, event["epoch"].get<uint64_t>(), event["version"].get<uint64_t>(),
                 event["model_hash"].get<uint64_t>(), now());
  };
  if (name == "committed") {
    held("commit");
  } else if (name == "producer_lost") {
    held("producer_lost");
  } else if (name == "exit") {
    held("exit");
  } else if (name == "joined") {
    std::lock_guard<std::mutex> lock(joined_mu_);
    joined_[consumer] = {event["epoch"].get<uint64_t>(), event["id"].get<uint32_t>()};
  } else if (name == "error" || name == "refused") {
    problem(fmt::format("{}: {}", consumer, event.dump()));
  }
}

Status Soak::start_consumer(int i) {
  const std::string host = SoakCluster::consumer_host(i);
  {
    std::lock_guard<std::mutex> lock(joined_mu_);
    joined_.erase(host);
  }
  ledger_.consumer_up(host, now());
  return cluster_.start_consumer(i);
}

void Soak::kill_consumer(int i) {
  cluster_.kill_consumer(i);
  ledger_.consumer_down(SoakCluster::consumer_host(i), now());
}

void Soak::log_fault(Json entry) {
  entry["at"] = now();
  std::lock_guard<std::mutex> lock(fault_mu_);
  fault_log_.push_back(std::move(entry));
}

void Soak::carry_out(const FaultAction& a) {
  Status s;
  switch (a.kind) {
    case FaultKind::kRailCut: s = testbed_.set_plane_link(a.plane, a.host, false); break;
    case FaultKind::kRailRestore: s = testbed_.set_plane_link(a.plane, a.host, true); break;
    case FaultKind::kRailThrottle:
    case FaultKind::kRailUnthrottle: s = testbed_.set_plane_rate(a.plane, a.host, a.rate); break;
    case FaultKind::kConsumerKill: kill_consumer(SoakCluster::consumer_index(a.host)); break;
    case FaultKind::kConsumerRestart: s = start_consumer(SoakCluster::consumer_index(a.host)); break;
  }
  if (!s.ok()) problem(fmt::format("{} on {}: {}", fault_kind_name(a.kind), a.host, s.to_string()));
  if (starts_fault(a.kind)) ledger_.fault(fault_kind_name(a.kind));
  Json entry = {{"kind", fault_kind_name(a.kind)}, {"host", a.host}};
  if (a.kind != FaultKind::kConsumerKill && a.kind != FaultKind::kConsumerRestart) entry["plane"] = a.plane;
  if (!a.rate.empty()) entry["rate"] = a.rate;
  log_fault(std::move(entry));
}

void Soak::note_crashes(bool restart) {
  for (const auto& [host, status] : cluster_.exited_by_themselves()) {
    ledger_.consumer_down(host, now());
    problem(fmt::format("consumer {} exited by itself: {}", host,
                        WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                                            : fmt::format("exit status {}", WEXITSTATUS(status))));
    // Started again, as a supervisor would: the soak goes on with every consumer.
    if (restart) {
      if (Status s = start_consumer(SoakCluster::consumer_index(host)); !s.ok()) problem(s.to_string());
    }
  }
}

void Soak::fault_loop() {
  std::unique_lock<std::mutex> lock(fault_mu_);
  while (fault_phase_ == FaultPhase::kInjecting) {
    const double wait = std::max(0.0, schedule_.next_at() - now());
    fault_cv_.wait_for(lock, std::chrono::duration<double>(std::min(wait, 1.0)),
                       [&] { return fault_phase_ != FaultPhase::kInjecting; });
    if (fault_phase_ != FaultPhase::kInjecting) break;
    const auto actions = schedule_.due(now());
    lock.unlock();
    for (const auto& a : actions) carry_out(a);
    note_crashes(/*restart=*/true);
    lock.lock();
  }
  lock.unlock();
  for (const auto& a : schedule_.undo_all(now())) carry_out(a);
  lock.lock();
  if (fault_phase_ == FaultPhase::kUndoing) fault_phase_ = FaultPhase::kUndone;
  fault_cv_.notify_all();
  fault_cv_.wait(lock, [&] { return fault_phase_ == FaultPhase::kQuit; });
}

void Soak::set_fault_phase(FaultPhase phase) {
  std::unique_lock<std::mutex> lock(fault_mu_);
  fault_phase_ = phase;
  fault_cv_.notify_all();
  if (phase == FaultPhase::kUndoing) fault_cv_.wait(lock, [&] { return fault_phase_ == FaultPhase::kUndone; });
}

Status Soak::start_producer() {
  ++incarnation_;
  DC_ASSIGN_OR_RETURN(epoch_, cluster_.start_producer(args_.seed * 1000 + incarnation_));
  return Status();
}

Status Soak::rejoin_everyone(const std::string& why) {
  const auto until = Clock::now() + seconds(90);
  Json members;
  for (;;) {
    DC_ASSIGN_OR_RETURN(Json stats, cluster_.command("stats", "stats", seconds(30)));
    members = stats["members"];
    std::set<uint32_t> ids;
    for (const auto& m : members) ids.insert(m["id"].get<uint32_t>());
    bool all = true;
    {
      // A member record of a process killed a moment ago may linger (until its link is found
      // silent): the process up now counts only under the id its own join was given.
      std::lock_guard<std::mutex> lock(joined_mu_);
      for (int i = 0; i < args_.consumers; ++i) {
        if (!cluster_.consumer_up(i)) continue;
        const auto it = joined_.find(SoakCluster::consumer_host(i));
        if (it == joined_.end() || it->second.first != epoch_ || !ids.count(it->second.second)) all = false;
      }
    }
    if (all) return Status();
    if (Clock::now() > until) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return unavailable("{}: the consumers did not all join within 90 s; members: {}", why, members.dump());
}

std::string Soak::pick_argument() {
  if (std::uniform_int_distribution<int>(1, kFullOneIn)(versions_rng_) == 1) return "full";
  const size_t n = std::size(kLearningRates);
  return kLearningRates[std::uniform_int_distribution<size_t>(0, n - 1)(versions_rng_)];
}

Result<Soak::Outcome> Soak::one_version(bool kill_mid_round) {
  // A killed producer's version is a full one, so that its round is long enough to be cut.
  const std::string argument = kill_mid_round ? "full" : pick_argument();
  DC_ASSIGN_OR_RETURN(Json published, cluster_.command("publish " + argument, "published", seconds(120)));
  const double published_at = now();  // from here until a consumer holds it is its stall
  const uint64_t version = published["version"].get<uint64_t>();
  DC_ASSIGN_OR_RETURN(Json hash, cluster_.command("hash", "hash", seconds(60)));
  if (hash["version"].get<uint64_t>() != version || hash["epoch"].get<uint64_t>() != epoch_) {
    return internal_error("the producer hashed version {} of epoch {:x}, not version {} of {:x}",
                          hash["version"].get<uint64_t>(), hash["epoch"].get<uint64_t>(), version, epoch_);
  }
  ledger_.published(epoch_, version, hash["model_hash"].get<uint64_t>(), published["full"].get<bool>(),
                    published_at);
  if (kill_mid_round) {
    DC_ASSIGN_OR_RETURN(Json stats, cluster_.command("stats", "stats", seconds(30)));
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::uniform_real_distribution<double>(0, 0.05)(kills_rng_)));
    cluster_.kill_producer();
    const bool in_flight = stats["queued"].get<uint64_t>() > 0;
    ledger_.producer_killed(epoch_, version, in_flight, now());
    ledger_.fault("producer_kill");
    log_fault({{"kind", "producer_kill"}, {"host", "p"}, {"version", version}, {"in_flight", in_flight}});
    recovering_since_ = now();
    std::this_thread::sleep_for(milliseconds(500));  // the consumers notice and keep what they hold
    DC_RETURN_IF_ERROR(start_producer());
    DC_RETURN_IF_ERROR(rejoin_everyone("after the producer's restart"));
    return Outcome{version, 0};
  }
  DC_ASSIGN_OR_RETURN(Json waited, cluster_.command(fmt::format("wait {} {}", version, args_.round_timeout), "waited",
                                                    seconds(static_cast<int64_t>(args_.round_timeout) + 60)));
  if (!waited["ok"].get<bool>()) {
    ledger_.producer_wait_failed(epoch_, version, waited.value("error", ""));
  } else if (recovering_since_) {
    ledger_.producer_recovered(now() - *recovering_since_);
    recovering_since_.reset();
  }
  DC_ASSIGN_OR_RETURN(Json checked, cluster_.command(fmt::format("check {} 30", version), "checked", seconds(90)));
  Outcome outcome{version, 0};
  for (const auto& m : checked["members"]) {
    if (!m["answered"].get<bool>()) continue;  // killed meanwhile (a live one is judged by its commits)
    ledger_.check_answer(m["name"].get<std::string>(), epoch_, version, m["held"].get<uint64_t>(),
                         m["exact"].get<bool>());
    outcome.exact += m["held"].get<uint64_t>() == version && m["exact"].get<bool>();
  }
  return outcome;
}

Status Soak::settle() {
  DC_RETURN_IF_ERROR(rejoin_everyone("at the end"));
  DC_ASSIGN_OR_RETURN(const Outcome last, one_version(false));
  if (last.exact != args_.consumers) {
    return mismatch("{} of {} consumers hold version {} exactly", last.exact, args_.consumers, last.version);
  }
  return Status();
}

void Soak::show_progress(bool force) {
  // On a terminal the line is rewritten every second; in a log (CI) a line every 30 s is enough.
  const auto t = Clock::now();
  const auto every = isatty(STDERR_FILENO) ? seconds(1) : seconds(30);
  if (!force && t - last_progress_ < every) return;
  last_progress_ = t;
  const double done = now();
  ledger_.judge(done, args_.round_timeout, false);
  const Json s = ledger_.summary();
  progress_.update(fmt::format("soak {:02d}:{:02d} of {:.0f} min: {} versions, {} faults, {} mismatches, {} lost, worst "
                               "stall {:.0f} ms",
                               static_cast<int>(done) / 60, static_cast<int>(done) % 60, args_.minutes,
                               s["versions"].get<uint64_t>(), s["faults"].get<uint64_t>(),
                               s["mismatches"].get<uint64_t>(), s["lost_versions"].get<uint64_t>(),
                               s["max_stall_ms"].is_null() ? 0.0 : s["max_stall_ms"].get<double>()));
}

void Soak::loop_versions() {
  const double end = args_.minutes * 60;
  double next_producer_kill = args_.producer_kill_every > 0 ? args_.producer_kill_every : end + 1;
  while (now() < end && !stop_requested()) {
    const bool kill = now() >= next_producer_kill;
    if (kill) {
      next_producer_kill += args_.producer_kill_every * std::uniform_real_distribution<double>(0.75, 1.25)(kills_rng_);
    }
    if (auto v = one_version(kill); !v.ok()) {
      // The producer stopped answering (or died by itself): noted, and a new one takes over.
      problem(fmt::format("version loop: {}", v.status().to_string()));
      if (Status r = start_producer(); !r.ok()) problem("the producer did not restart: " + r.to_string());
      if (Status r = rejoin_everyone("after a producer failure"); !r.ok()) problem(r.to_string());
    }
    show_progress(false);
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::uniform_real_distribution<double>(0, args_.max_gap_ms / 1000)(versions_rng_)));
  }
}

Json Soak::run() {
  progress_.update(fmt::format("starting a producer and {} consumers", args_.consumers));
  // An exception here is a malformed event or answer: noted, and the soak ends as it would.
  bool looped = false;
  try {
    if (Status s = start_producer(); !s.ok()) problem("the producer did not start: " + s.to_string());
    for (int i = 0; i < args_.consumers; ++i) {
      if (Status s = start_consumer(i); !s.ok()) problem(s.to_string());
    }
    if (Status s = rejoin_everyone("at the start"); !s.ok()) problem(s.to_string());
    fault_thread_ = std::thread([this] { fault_loop(); });
    loop_versions();
    looped = true;
  } catch (const std::exception& e) {
    problem(fmt::format("the soak stopped: {}", e.what()));
  }
  // The end: every fault undone, everyone back, one more version, and every consumer checked.
  progress_.update("undoing every fault; a last version to every consumer");
  if (fault_thread_.joinable()) set_fault_phase(FaultPhase::kUndoing);
  try {
    if (looped) {
      if (Status s = settle(); !s.ok()) problem("the last version: " + s.to_string());
    }
  } catch (const std::exception& e) {
    problem(fmt::format("the last version: {}", e.what()));
  }
  note_crashes(/*restart=*/false);
  const double seconds_run = now();
  cluster_.stop_consumers();  // each reports what it holds as it exits: checked too
  for (int i = 0; i < args_.consumers; ++i) ledger_.consumer_down(SoakCluster::consumer_host(i), now());
  cluster_.kill_producer();
  ledger_.judge(now(), args_.round_timeout, /*final=*/true);
  show_progress(true);
  progress_.finish();
  return report(seconds_run);
}

Json Soak::report(double seconds_run) const {
  Json r = ledger_.summary();
  r["minutes"] = seconds_run / 60;
  r["interrupted"] = stop_requested();
  r["consumers"] = args_.consumers;
  r["rails"] = args_.rails;
  r["rail_rate"] = args_.rail_rate;
  r["protection"] = args_.trust.protection;
  r["rekey_after_bytes"] = args_.trust.rekey_after_bytes;
  r["elements"] = args_.elements;
  r["seed"] = args_.seed;
  r["fault_log"] = fault_log_;
  r["ok"] = r["mismatches"] == 0 && r["lost_versions"] == 0 && r["problem_count"] == 0 && r["unverified"] == 0;
  return r;
}

void print_report(const Json& r) {
  fmt::print("deltacast-bench soak: {:.1f} min{}, 1 producer -> {} consumers over {} rails at {}, {} model\n",
             r["minutes"].get<double>(), r["interrupted"].get<bool>() ? " (interrupted)" : "",
             r["consumers"].get<int>(), r["rails"].get<int>(), r["rail_rate"].get<std::string>(),
             human_bytes(2.0 * r["elements"].get<double>()));
  fmt::print("  versions       {} ({} full; {} producer epochs)\n", r["versions"].get<uint64_t>(),
             r["full_versions"].get<uint64_t>(), r["producer_epochs"].get<uint64_t>());
  std::vector<std::string> kinds;
  for (const auto& [kind, count] : r["faults_by_kind"].items()) kinds.push_back(fmt::format("{} {}", kind, count.get<uint64_t>()));
  fmt::print("  faults         {}: {} ({} producer kills mid-version)\n", r["faults"].get<uint64_t>(),
             fmt::join(kinds, ", "), r["producer_kills_mid_version"].get<uint64_t>());
  std::vector<std::string> checked;
  for (const auto& [when, count] : r["verified"].items()) checked.push_back(fmt::format("{} {}", when, count.get<uint64_t>()));
  fmt::print("  models checked {} (not checkable: {})\n", fmt::join(checked, ", "), r["unverified"].get<uint64_t>());
  fmt::print("  mismatches     {}\n", r["mismatches"].get<uint64_t>());
  fmt::print("  lost versions  {} (delivered to a following consumer: {}; cut short by a kill: {})\n",
             r["lost_versions"].get<uint64_t>(), r["delivered"].get<uint64_t>(), r["cut_short"].get<uint64_t>());
  const auto ms = [&](const char* key) {
    return r[key].is_null() ? std::string("-") : fmt::format("{:.0f} ms", r[key].get<double>());
  };
  fmt::print("  worst stall    {} (median {}); worst catch-up of a started consumer {}; worst producer recovery {}\n",
             ms("max_stall_ms"), ms("median_stall_ms"), ms("max_catch_up_ms"), ms("max_producer_recovery_ms"));
  for (const auto& p : r["problems"]) fmt::print("  problem: {}\n", p.get<std::string>());
  fmt::print("  result: {}\n", r["ok"].get<bool>() ? "PASS" : "FAIL");
}

int run_soak(const SoakArgs& args) {
  if (Status s = NetnsTestbed::available(); !s.ok()) {
    fmt::print(stderr, "deltacast-bench soak: needs network namespaces: {}\n", s.message());
    return 77;
  }
  stop_on_signals();  // Ctrl-C ends the soak early, with its report
  std::vector<std::string> hosts = {"p"};
  for (int i = 0; i < args.consumers; ++i) hosts.push_back(SoakCluster::consumer_host(i));
  auto testbed = NetnsTestbed::create(hosts, {}, std::vector<TestbedPlane>(static_cast<size_t>(args.rails),
                                                                           TestbedPlane{args.rail_rate}));
  if (!testbed.ok()) {
    fmt::print(stderr, "deltacast-bench soak: {}\n", testbed.status().to_string());
    return 1;
  }
  Json r;
  {
    Soak soak(args, **testbed);
    r = soak.run();
  }
  if (args.json) {
    fmt::print("{}\n", r.dump());
  } else {
    print_report(r);
  }
  return r["ok"].get<bool>() ? 0 : 1;
}

}  // namespace

void add_soak_command(CLI::App& app) {
  auto args = std::make_shared<SoakArgs>();
  CLI::App* cmd = app.add_subcommand(
      "soak", "A long run with faults across network namespaces: every commit checked, nothing lost (root)");
  cmd->add_option("--minutes", args->minutes, "How long to publish versions and inject faults (Ctrl-C ends it early)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 24.0 * 60));
  cmd->add_option("--consumers", args->consumers, "Consumer processes")->capture_default_str()->check(CLI::Range(2, 32));
  cmd->add_option("--rails", args->rails, "Rails (switched planes) per process")->capture_default_str()->check(CLI::Range(1, 4));
  cmd->add_option("--rail-rate", args->rail_rate, "tbf rate of every port, e.g. 1gbit")->capture_default_str();
  cmd->add_option("--elements", args->elements, "bf16 elements of the model")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 32));
  cmd->add_option("--seed", args->seed, "Seed of the faults, the densities and the trace")->capture_default_str();
  add_trust_options(cmd, args->trust, "0x50a6");
  cmd->add_option("--fault-every", args->fault_every, "Mean seconds between rail and consumer faults")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--producer-kill-every", args->producer_kill_every,
                  "Seconds between producer SIGKILLs mid-version (+-25%; 0: never)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--max-gap-ms", args->max_gap_ms, "Pause between versions, uniformly up to this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60000.0));
  cmd->add_option("--round-timeout", args->round_timeout,
                  "Seconds a version may take to reach every consumer that was up and following before it counts "
                  "as lost")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("--port", args->port, "The producer's control port")->capture_default_str()->check(CLI::Range(1024, 65000));
  cmd->add_flag("--json", args->json,
                "One JSON object: versions, faults, mismatches, lost_versions, max_stall_ms and the rest, with every "
                "fault's time");
  cmd->add_flag("--verbose", args->verbose, "The processes' logs on stderr");
  cmd->callback([args] { throw CLI::RuntimeError(run_soak(*args)); });
}

}  // namespace deltacast::bench
