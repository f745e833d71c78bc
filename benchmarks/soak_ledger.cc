#include "soak_ledger.h"

#include <algorithm>

#include <fmt/format.h>

#include "bench_util.h"

namespace deltacast::bench {

namespace {

nlohmann::json milliseconds_max(const std::vector<double>& seconds) {
  if (seconds.empty()) return nullptr;
  return 1000 * *std::max_element(seconds.begin(), seconds.end());
}

nlohmann::json milliseconds_median(const std::vector<double>& seconds) {
  if (seconds.empty()) return nullptr;
  return 1000 * median(seconds);
}

}  // namespace

void SoakLedger::note_problem(const std::string& what) {
  ++problem_count_;
  if (problems_.size() < kProblemsKept) problems_.push_back(what);
}

void SoakLedger::problem(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  note_problem(what);
}

void SoakLedger::compare(const Pending& p, uint64_t expected) {
  if (p.hash == expected) {
    ++verified_[p.when];
    return;
  }
  ++mismatches_;
  note_problem(fmt::format("{} ({}): holds version {} of epoch {:x} with hash {:016x}, the producer's is {:016x}",
                           p.consumer, p.when, p.version, p.epoch, p.hash, expected));
}

void SoakLedger::published(uint64_t epoch, uint64_t version, uint64_t hash, bool full) {
  std::lock_guard<std::mutex> lock(mu_);
  hashes_[{epoch, version}] = hash;
  epochs_[epoch] = true;
  ++versions_;
  if (full) ++full_versions_;
  // Commits reported before the hash was known are checked now.
  auto waiting = std::stable_partition(pending_.begin(), pending_.end(),
                                       [&](const Pending& p) { return p.epoch != epoch || p.version != version; });
  for (auto it = waiting; it != pending_.end(); ++it) compare(*it, hash);
  pending_.erase(waiting, pending_.end());
}

void SoakLedger::held(const std::string& consumer, const std::string& when, uint64_t epoch, uint64_t version,
                      uint64_t hash, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (when == "commit") {
    commit_epoch_[consumer] = epoch;
    if (auto it = catching_up_.find(consumer); it != catching_up_.end()) {
      catch_ups_.push_back(now - it->second);
      catching_up_.erase(it);
    }
  }
  if (version == 0) return;  // holds nothing yet: there is nothing to compare
  const Pending p{consumer, when, epoch, version, hash};
  if (auto it = hashes_.find({epoch, version}); it != hashes_.end()) {
    compare(p, it->second);
  } else {
    pending_.push_back(p);
  }
}

void SoakLedger::check_answer(const std::string& consumer, uint64_t epoch, uint64_t version, uint64_t held,
                              bool exact) {
  std::lock_guard<std::mutex> lock(mu_);
  // A consumer that rejoined a restarted producer may still hold an older epoch's version under
  // the same number (it is being brought up by a full sync): only answers about this epoch count.
  if (held != version || commit_epoch_[consumer] != epoch) return;
  ++check_answers_;
  if (exact) {
    ++verified_["check"];
  } else {
    ++mismatches_;
    note_problem(fmt::format("{}: the producer's check of version {} (epoch {:x}) found other bits", consumer,
                             version, epoch));
  }
}

void SoakLedger::round(uint64_t epoch, uint64_t version, bool everywhere, double seconds, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (everywhere) {
    stalls_.push_back(seconds);
    return;
  }
  ++lost_;
  note_problem(fmt::format("version {} of epoch {:x} did not reach every live consumer within {:.1f} s: {}", version,
                           epoch, seconds, error));
}

void SoakLedger::abandoned(uint64_t, uint64_t) {
  std::lock_guard<std::mutex> lock(mu_);
  ++abandoned_;
}

void SoakLedger::fault(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++faults_[kind];
}

void SoakLedger::consumer_started(const std::string& consumer, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  catching_up_[consumer] = now;
}

void SoakLedger::producer_recovered(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  recoveries_.push_back(seconds);
}

uint64_t SoakLedger::mismatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mismatches_;
}

uint64_t SoakLedger::lost_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

uint64_t SoakLedger::versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return versions_;
}

uint64_t SoakLedger::faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [kind, count] : faults_) n += count;
  return n;
}

nlohmann::json SoakLedger::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t faults = 0;
  for (const auto& [kind, count] : faults_) faults += count;
  nlohmann::json verified = nlohmann::json::object();
  for (const auto& [when, count] : verified_) verified[when] = count;
  return {{"versions", versions_},
          {"full_versions", full_versions_},
          {"producer_epochs", epochs_.size()},
          {"faults", faults},
          {"faults_by_kind", faults_},
          {"verified", verified},
          {"check_answers", check_answers_},
          {"unverified", pending_.size()},
          {"mismatches", mismatches_},
          {"lost_versions", lost_},
          {"abandoned_versions", abandoned_},
          {"max_stall_ms", milliseconds_max(stalls_)},
          {"median_stall_ms", milliseconds_median(stalls_)},
          {"max_catch_up_ms", milliseconds_max(catch_ups_)},
          {"max_producer_recovery_ms", milliseconds_max(recoveries_)},
          {"problem_count", problem_count_},
          {"problems", problems_}};
}

}  // namespace deltacast::bench
