// What the soak saw and whether it was right, judged from the consumers' own reports rather than
// the engine's: the producer's hash of every version it published (per producer epoch: a
// restarted producer numbers its versions afresh), every model a consumer reported holding (at
// each commit, when it lost the producer, at its exit) compared with it; when each version was
// published and when each consumer process committed it (or a newer one), from which come the
// lost versions and the stalls; the faults carried out; and anything that went wrong, in words.
// Reports come from several threads in any order; a commit reported before the driver learned
// its version's hash waits for it.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deltacast::bench {

class SoakLedger {
 public:
  // `now`: seconds since the soak started, for every call that takes it.
  // The producer of `epoch` published `version` at `now`; its model hashes to `hash`.
  void published(uint64_t epoch, uint64_t version, uint64_t hash, bool full, double now);
  // A consumer holds (epoch, version) with `hash`; `when`: "commit", "producer_lost" or "exit".
  void held(const std::string& consumer, const std::string& when, uint64_t epoch, uint64_t version, uint64_t hash,
            double now);
  // The producer's check of `version` found `consumer` holding `held` (exact: its verdict).
  void check_answer(const std::string& consumer, uint64_t epoch, uint64_t version, uint64_t held, bool exact);
  // The producer's own wait for `version` ended without every member holding it: a lost version
  // whatever the consumers report.
  void producer_wait_failed(uint64_t epoch, uint64_t version, const std::string& error);
  // Published, then its producer was killed at `now` (`in_flight`: its round had not ended).
  void producer_killed(uint64_t epoch, uint64_t version, bool in_flight, double now);
  // A consumer process started or went away (killed, crashed, stopped) at `now`.
  void consumer_up(const std::string& consumer, double now);
  void consumer_down(const std::string& consumer, double now);
  void fault(const std::string& kind);
  void producer_recovered(double seconds);
  void problem(const std::string& what);

  // Judges every version whose time is up by `now`: a consumer process that was up from its
  // publish until `round_timeout` later (or the soak's end), and had committed an earlier version
  // of the same producer, must commit it or a newer one by then, or the version is lost; the time
  // it took the last such consumer is the version's stall. With `final`, the soak is over:
  // every window closes at `now`, and a commit whose version was never published is a problem.
  void judge(double now, double round_timeout, bool final);

  uint64_t mismatches() const;
  uint64_t lost_versions() const;
  nlohmann::json summary() const;

 private:
  struct Pending {
    std::string consumer;
    std::string when;
    uint64_t epoch, version, hash;
  };
  struct Publication {
    uint64_t epoch, version;
    double at;
    bool judged = false;
  };
  struct Commit {
    uint64_t version;
    double at;
  };
  void compare(const Pending& p, uint64_t expected);
  void note_problem(const std::string& what);
  bool up_throughout(const std::string& consumer, double from, double to) const;

  static constexpr size_t kProblemsKept = 50;
  static constexpr double kForever = std::numeric_limits<double>::infinity();
  mutable std::mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> hashes_;  // (epoch, version) -> model hash
  std::vector<Pending> pending_;
  std::vector<Publication> publications_;
  std::map<std::pair<std::string, uint64_t>, std::vector<Commit>> commits_;  // (consumer, epoch) -> in order
  std::map<std::string, std::vector<std::pair<double, double>>> up_;         // consumer -> [start, end)
  std::map<uint64_t, double> epoch_end_;                                     // when its producer was killed
  std::map<std::string, uint64_t> commit_epoch_;  // per consumer: the epoch of its newest commit
  std::map<std::string, double> catching_up_;      // per started consumer: since when
  std::map<std::string, uint64_t> faults_;
  std::map<std::string, uint64_t> verified_;       // per `when`: models found equal to the producer's
  std::set<std::pair<uint64_t, uint64_t>> lost_;
  std::vector<double> stalls_;                     // per judged version: its slowest consumer
  std::vector<double> catch_ups_;
  std::vector<double> recoveries_;
  std::vector<std::string> problems_;
  std::set<uint64_t> epochs_;
  uint64_t problem_count_ = 0;
  uint64_t full_versions_ = 0, kills_ = 0, kills_in_flight_ = 0, mismatches_ = 0, check_answers_ = 0;
  uint64_t judged_pairs_ = 0, cut_short_ = 0;
};

}  // namespace deltacast::bench
