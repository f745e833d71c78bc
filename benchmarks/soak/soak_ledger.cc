#include "soak/soak_ledger.h"

#include <algorithm>

#include <fmt/format.h>

#include "cli/bench_util.h"

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

void SoakLedger::published(uint64_t epoch, uint64_t version, uint64_t hash, bool full, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  hashes_[{epoch, version}] = hash;
  epochs_.insert(epoch);
  publications_.push_back(Publication{epoch, version, now});
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
    commits_[{consumer, epoch}].push_back(Commit{version, now});
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
  // An answer about an older version, or from a consumer that has not committed anything of this
  // producer's yet (it may hold an older producer's version under the same number while a full
  // sync is on its way), says nothing about `version`; every commit is compared anyway.
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

void SoakLedger::producer_wait_failed(uint64_t epoch, uint64_t version, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  lost_.insert({epoch, version});
  note_problem(fmt::format("version {} of epoch {:x}: the producer's wait failed: {}", version, epoch, error));
}

void SoakLedger::producer_killed(uint64_t epoch, uint64_t, bool in_flight, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_end_[epoch] = now;
  ++kills_;
  if (in_flight) ++kills_in_flight_;
}

void SoakLedger::consumer_up(const std::string& consumer, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  up_[consumer].emplace_back(now, kForever);
  catching_up_[consumer] = now;
}

void SoakLedger::consumer_down(const std::string& consumer, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& intervals = up_[consumer];
  if (!intervals.empty() && intervals.back().second == kForever) intervals.back().second = now;
  catching_up_.erase(consumer);
}

void SoakLedger::fault(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++faults_[kind];
}

void SoakLedger::producer_recovered(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  recoveries_.push_back(seconds);
}

void SoakLedger::judge(double now, double round_timeout, bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Publication& p : publications_) {
    if (p.judged) continue;
    const double deadline = p.at + round_timeout;
    const auto end = epoch_end_.find(p.epoch);
    const bool killed_before_deadline = end != epoch_end_.end() && end->second < deadline;
    double closes = killed_before_deadline ? end->second : deadline;
    if (final) closes = std::min(closes, now);
    if (closes > now) continue;  // its time is not up yet
    p.judged = true;
    std::optional<double> slowest;
    for (const auto& [consumer, intervals] : up_) {
      // The process that was up when the version came out.
      const auto life = std::find_if(intervals.begin(), intervals.end(),
                                     [&](const auto& i) { return i.first <= p.at && p.at < i.second; });
      if (life == intervals.end()) continue;
      const auto found = commits_.find({consumer, p.epoch});
      if (found == commits_.end()) continue;
      // It followed this producer already (an earlier version committed by this process);
      // otherwise it was catching up, which max_catch_up_ms measures.
      const auto& commits = found->second;
      const auto mine = [&](const Commit& c) { return c.at >= life->first && c.at < life->second; };
      const bool following = std::any_of(commits.begin(), commits.end(),
                                         [&](const Commit& c) { return mine(c) && c.version < p.version; });
      if (!following) continue;
      const auto got = std::find_if(commits.begin(), commits.end(),
                                    [&](const Commit& c) { return mine(c) && c.version >= p.version; });
      if (got != commits.end() && got->at <= closes) {
        slowest = std::max(slowest.value_or(0.0), std::max(0.0, got->at - p.at));
        ++judged_pairs_;
      } else if (life->second >= closes && !killed_before_deadline) {
        // Up all along and nothing: lost to it.
        if (lost_.insert({p.epoch, p.version}).second) {
          note_problem(fmt::format("version {} of epoch {:x} (published at {:.1f} s): {} was up and did not commit it "
                                   "(or a newer one) within {:.0f} s",
                                   p.version, p.epoch, p.at, consumer, closes - p.at));
        }
      } else {
        ++cut_short_;  // it went down, or the producer was killed, before the version reached it
      }
    }
    if (slowest) stalls_.push_back(*slowest);
  }
  if (final) {
    for (const Pending& p : pending_) {
      ++mismatches_;
      note_problem(fmt::format("{} ({}): holds version {} of epoch {:x}, which its producer never published", p.consumer,
                               p.when, p.version, p.epoch));
    }
    pending_.clear();
  }
}

uint64_t SoakLedger::mismatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mismatches_;
}

uint64_t SoakLedger::lost_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_.size();
}

nlohmann::json SoakLedger::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t faults = 0;
  for (const auto& [kind, count] : faults_) faults += count;
  nlohmann::json verified = nlohmann::json::object();
  for (const auto& [when, count] : verified_) verified[when] = count;
  return {{"versions", publications_.size()},
          {"full_versions", full_versions_},
          {"producer_epochs", epochs_.size()},
          {"producer_kills", kills_},
          {"producer_kills_mid_version", kills_in_flight_},
          {"faults", faults},
          {"faults_by_kind", faults_},
          {"verified", verified},
          {"check_answers", check_answers_},
          {"unverified", pending_.size()},
          {"mismatches", mismatches_},
          {"lost_versions", lost_.size()},
          {"delivered", judged_pairs_},
          {"cut_short", cut_short_},
          {"max_stall_ms", milliseconds_max(stalls_)},
          {"median_stall_ms", milliseconds_median(stalls_)},
          {"max_catch_up_ms", milliseconds_max(catch_ups_)},
          {"max_producer_recovery_ms", milliseconds_max(recoveries_)},
          {"problem_count", problem_count_},
          {"problems", problems_}};
}

}  // namespace deltacast::bench
