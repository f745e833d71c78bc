#include "soak/soak_faults.h"

#include <algorithm>

namespace deltacast::bench {

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kRailCut: return "rail_cut";
    case FaultKind::kRailRestore: return "rail_restore";
    case FaultKind::kRailThrottle: return "rail_throttle";
    case FaultKind::kRailUnthrottle: return "rail_unthrottle";
    case FaultKind::kConsumerKill: return "consumer_kill";
    case FaultKind::kConsumerRestart: return "consumer_restart";
  }
  return "?";
}

bool starts_fault(FaultKind kind) {
  return kind == FaultKind::kRailCut || kind == FaultKind::kRailThrottle || kind == FaultKind::kConsumerKill;
}

FaultSchedule::FaultSchedule(FaultScheduleOptions options) : options_(std::move(options)), rng_(options_.seed) {
  next_start_ = std::exponential_distribution<double>(1.0 / options_.mean_interval)(rng_);
}

double FaultSchedule::next_at() const {
  return undos_.empty() ? next_start_ : std::min(next_start_, undos_.front().at);
}

bool FaultSchedule::start_fault(double at, FaultAction& out) {
  // One fault per host at a time keeps every host on at least one rail (planes >= 2); with one
  // plane a cut would isolate the host, so only throttles are left.
  std::vector<std::pair<std::string, size_t>> free_ports, cuttable;
  for (const auto& host : options_.hosts) {
    const bool busy = std::any_of(faulted_ports_.begin(), faulted_ports_.end(),
                                  [&](const auto& port) { return port.first == host; });
    if (busy) continue;
    for (size_t plane = 0; plane < options_.planes; ++plane) {
      free_ports.emplace_back(host, plane);
      // Cuts in force all lie on one plane, so any two hosts still share the others: a cut of
      // the producer's port on one plane and a consumer's on another would cut that consumer
      // off, which is a partition, not a rail fault.
      if (cut_plane_ < 0 || static_cast<size_t>(cut_plane_) == plane) cuttable.emplace_back(host, plane);
    }
  }
  std::vector<std::string> killable;
  if (consumers_down_.size() < options_.max_consumers_down) {
    for (const auto& c : options_.consumers) {
      if (!consumers_down_.count(c)) killable.push_back(c);
    }
  }
  std::vector<FaultKind> kinds;
  if (!cuttable.empty() && options_.planes >= 2) kinds.push_back(FaultKind::kRailCut);
  if (!free_ports.empty()) kinds.push_back(FaultKind::kRailThrottle);
  if (!killable.empty()) kinds.push_back(FaultKind::kConsumerKill);
  if (kinds.empty()) return false;
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); };
  const double lasts = std::uniform_real_distribution<double>(options_.min_duration, options_.max_duration)(rng_);
  out = FaultAction{};
  out.kind = kinds[pick(kinds.size())];
  out.at = at;
  FaultAction undo;
  undo.at = at + lasts;
  if (out.kind == FaultKind::kConsumerKill) {
    out.host = killable[pick(killable.size())];
    consumers_down_.insert(out.host);
    undo.kind = FaultKind::kConsumerRestart;
    undo.host = out.host;
  } else {
    const auto& ports = out.kind == FaultKind::kRailCut ? cuttable : free_ports;
    const auto port = ports[pick(ports.size())];
    out.host = port.first;
    out.plane = port.second;
    faulted_ports_.insert(port);
    undo.host = port.first;
    undo.plane = port.second;
    if (out.kind == FaultKind::kRailCut) {
      cut_plane_ = static_cast<int>(port.second);
      ++cuts_;
    }
    if (out.kind == FaultKind::kRailThrottle) {
      out.rate = options_.throttle_rates[pick(options_.throttle_rates.size())];
      undo.kind = FaultKind::kRailUnthrottle;
      undo.rate = options_.rate;
    } else {
      undo.kind = FaultKind::kRailRestore;
    }
  }
  undos_.insert(std::upper_bound(undos_.begin(), undos_.end(), undo,
                                 [](const FaultAction& a, const FaultAction& b) { return a.at < b.at; }),
                undo);
  return true;
}

void FaultSchedule::note_undone(const FaultAction& undo) {
  if (undo.kind == FaultKind::kConsumerRestart) {
    consumers_down_.erase(undo.host);
  } else {
    faulted_ports_.erase({undo.host, undo.plane});
    if (undo.kind == FaultKind::kRailRestore && --cuts_ == 0) cut_plane_ = -1;
  }
}

std::vector<FaultAction> FaultSchedule::due(double now) {
  std::vector<FaultAction> out;
  for (;;) {
    const bool undo_first = !undos_.empty() && undos_.front().at <= next_start_;
    if (undo_first) {
      if (undos_.front().at > now) break;
      out.push_back(undos_.front());
      note_undone(undos_.front());
      undos_.erase(undos_.begin());
      continue;
    }
    if (next_start_ > now) break;
    FaultAction start;
    if (start_fault(next_start_, start)) out.push_back(start);
    next_start_ += std::exponential_distribution<double>(1.0 / options_.mean_interval)(rng_);
  }
  return out;
}

std::vector<FaultAction> FaultSchedule::undo_all(double now) {
  std::vector<FaultAction> out;
  for (auto& undo : undos_) {
    undo.at = now;
    note_undone(undo);
    out.push_back(undo);
  }
  undos_.clear();
  return out;
}

}  // namespace deltacast::bench
