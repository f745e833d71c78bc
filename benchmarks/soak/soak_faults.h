// The soak's random faults as a schedule that only decides (soak_command.cc carries them out):
// when the next fault starts, of which kind, on which port or consumer, and when it is undone.
// A host has at most one port faulted (cut or throttled) at a time, and the cuts in force all lie
// on one plane, so every pair of hosts keeps a plane in common (losing that is a partition or a
// node failure, which the consumer kills cover); a consumer that is down is not killed again, and
// at most `max_consumers_down` are down at once. The same seed gives the same faults at the same
// times.
#pragma once

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace deltacast::bench {

enum class FaultKind { kRailCut, kRailRestore, kRailThrottle, kRailUnthrottle, kConsumerKill, kConsumerRestart };

// The report's name of a fault kind: rail_cut, rail_restore, ...
const char* fault_kind_name(FaultKind kind);
// Whether an action starts a fault (as opposed to undoing one).
bool starts_fault(FaultKind kind);

struct FaultAction {
  FaultKind kind = FaultKind::kRailCut;
  double at = 0;      // seconds since the soak started
  std::string host;   // the host whose port (rail faults) or whose consumer process (consumer faults)
  size_t plane = 0;   // rail faults: which plane's port
  std::string rate;   // throttle: the reduced rate; unthrottle: the normal rate back
};

struct FaultScheduleOptions {
  std::vector<std::string> hosts;      // every host with ports on the planes (the producer's too)
  std::vector<std::string> consumers;  // the hosts whose consumer process may be killed
  size_t planes = 2;
  double mean_interval = 8;            // seconds between the starts of faults (exponentially distributed)
  double min_duration = 1;             // how long a fault lasts, uniformly between these
  double max_duration = 8;
  size_t max_consumers_down = 2;
  std::string rate = "1gbit";          // every port's normal rate
  std::vector<std::string> throttle_rates = {"50mbit", "100mbit", "300mbit"};
  uint64_t seed = 1;
};

class FaultSchedule {
 public:
  explicit FaultSchedule(FaultScheduleOptions options);

  // Every action due at or before `now`, in time order; each returned once.
  std::vector<FaultAction> due(double now);
  // When the next action is due.
  double next_at() const;
  // What undoes every fault still in force (the soak's end), due `now`.
  std::vector<FaultAction> undo_all(double now);

 private:
  // Picks the next fault to start at `at`; false when no host or consumer can take one now.
  bool start_fault(double at, FaultAction& out);
  void note_undone(const FaultAction& undo);

  FaultScheduleOptions options_;
  std::mt19937_64 rng_;
  double next_start_ = 0;
  std::vector<FaultAction> undos_;                       // pending, sorted by `at`
  std::set<std::pair<std::string, size_t>> faulted_ports_;  // (host, plane) with a fault in force
  std::set<std::string> consumers_down_;
  int cut_plane_ = -1;  // the plane the cuts in force lie on (-1: none in force)
  size_t cuts_ = 0;
};

}  // namespace deltacast::bench
