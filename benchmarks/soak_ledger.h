// What the soak saw and whether it was right: the producer's hash of every version it published
// (per producer epoch: a restarted producer numbers its versions afresh), every model a consumer
// reported holding (at each commit, when it lost the producer, at its exit) checked against it,
// the rounds' stalls, the faults carried out, and anything that went wrong in words. Reports come
// from several threads in any order; a commit reported before the driver learned its version's
// hash waits for it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deltacast::bench {

class SoakLedger {
 public:
  // The producer of `epoch` published `version`, whose model hashes to `hash`.
  void published(uint64_t epoch, uint64_t version, uint64_t hash, bool full);
  // A consumer holds (epoch, version) with `hash`; `when`: "commit", "producer_lost" or "exit". `now`:
  // seconds since the soak started.
  void held(const std::string& consumer, const std::string& when, uint64_t epoch, uint64_t version, uint64_t hash,
            double now);
  // The producer's check of `version` found `consumer` holding `held` with `hash` (exact: its verdict).
  void check_answer(const std::string& consumer, uint64_t epoch, uint64_t version, uint64_t held, bool exact);
  // A round ended: every live consumer committed the version (or a newer one) after `seconds`, or not.
  void round(uint64_t epoch, uint64_t version, bool everywhere, double seconds, const std::string& error);
  // Published, then its producer was killed before the round ended: not owed to anyone.
  void abandoned(uint64_t epoch, uint64_t version);
  void fault(const std::string& kind);
  // A consumer process started again at `now`: its first commit after it ends its catch-up.
  void consumer_started(const std::string& consumer, double now);
  void producer_recovered(double seconds);
  void problem(const std::string& what);

  uint64_t mismatches() const;
  uint64_t lost_versions() const;
  uint64_t versions() const;
  uint64_t faults() const;
  nlohmann::json summary() const;

 private:
  struct Pending {
    std::string consumer;
    std::string when;
    uint64_t epoch, version, hash;
  };
  void compare(const Pending& p, uint64_t expected);
  void note_problem(const std::string& what);

  static constexpr size_t kProblemsKept = 50;
  mutable std::mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> hashes_;  // (epoch, version) -> model hash
  std::vector<Pending> pending_;
  std::map<std::string, uint64_t> commit_epoch_;  // per consumer: the epoch of its newest commit
  std::map<std::string, double> catching_up_;      // per restarted consumer: when it started
  std::map<std::string, uint64_t> faults_;
  std::map<std::string, uint64_t> verified_;       // per `when`: models found equal to the producer's
  std::vector<double> stalls_;
  std::vector<double> catch_ups_;
  std::vector<double> recoveries_;
  std::vector<std::string> problems_;
  uint64_t problem_count_ = 0;
  uint64_t versions_ = 0, full_versions_ = 0, abandoned_ = 0, lost_ = 0, mismatches_ = 0, check_answers_ = 0;
  std::map<uint64_t, bool> epochs_;
};

}  // namespace deltacast::bench
