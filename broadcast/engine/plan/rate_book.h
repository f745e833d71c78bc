// The one place that decides which members are slow. Every sender (the
// producer, and every consumer that relays) reports, per round, how its link
// into each child did (LinkSample); the book folds a round's reports into what
// it knows of each member, and judges who goes to the chains' tails.
//
// What a round's reports prove about a member:
//  - Its links' rail rates, summed, are what it took from all its parents
//    together (they share its port, and in pipelined chains they run at the
//    same time): a lower bound of what it can take, whoever else was the limit.
//  - When a link into it had slices waiting for room most of its busy time,
//    it was the bottleneck of its chain, and that sum is its capacity, unless
//    the sender explains the wait: a sender whose several links all waited had
//    its own uplink as the limit (the producer feeding every chain's head), and
//    a sender itself measured about as slow has a port slow both ways (an
//    excuse a member at the tails never gets: its feeders are held back by it).
//
// A member measured as a bottleneck at under kSlowFraction of the healthy rate
// (the upper median of what the others are known to take, known only while most
// of them were measured: in a short round only the longest-busy links are) is
// slow. At the tails it hangs from a healthy member (planner.h), and stays until what it takes
// (its capacity, or a newer inbound rate) reaches kRecoverFraction of the
// healthy rate. The healthy rate comes from lower bounds too, so it is there
// even when every healthy link kept up: a machine with cores to spare, where no
// healthy link is ever a bottleneck, finds a slow member as surely as one whose
// cores are busy.
//
// Thread-safe: reports come from control-link threads, verdicts from the round loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "broadcast/transport/rail_estimator.h"
#include "broadcast/transport/slice_table.h"

namespace deltacast {

// The sender id of the producer in reports (consumers are numbered from 1).
inline constexpr uint32_t kProducerSender = 0;

inline constexpr double kSlowFraction = 0.6;
inline constexpr double kRecoverFraction = 0.8;
// A link's share of busy time with slices waiting that makes it a bottleneck.
inline constexpr double kBottleneckShare = 0.5;
// Reports on fewer slices or less busy time say nothing (a small sparse version).
inline constexpr uint32_t kMinSamplesSlices = 16;
inline constexpr double kMinSampleSeconds = 0.005;
// A round trip reported longer than this counts as this long (a report is untrusted input).
inline constexpr double kMaxRoundTripSeconds = 10;

// What the book knows of one member.
struct MemberRates {
  double inbound = 0;        // bytes/s it took from all its parents together, last measured (0: never)
  double capacity = 0;       // the same, from a round in which a link into it was its bottleneck (0: it kept up)
  uint32_t capacity_from = 0;  // the sender of that link
  bool slow = false;         // at the tails since the last adopted verdict
  uint64_t rounds = 0;       // rounds that measured it

  // What it is known to take: a slow member's capacity may be older than its last inbound rate,
  // and whichever is higher it has shown it can take.
  double known() const { return capacity > inbound ? capacity : inbound; }
};

struct SlowVerdict {
  std::vector<uint32_t> slow;  // slowest last
  double healthy = 0;          // the healthy rate judged against (0: none known)
  // Where too few members were measured for a healthy rate: the upper median of those that were
  // (the slowest links, at best a lower bound of the rate; 0: none measured, or `healthy` known).
  double partial = 0;
  uint32_t slice_bytes = 0;    // the slices of the last round measured (0: not known)
};

class RateBook {
 public:
  // A sender's report on its link into `child` in the current round (of `version`).
  void record(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version = 0);
  // A sender's later, whole report on its link into `child` in `version` (control::Forwarded: its
  // forwarding ended after it staged): what the book knows of that link (wan_into), not the round's
  // judgement of its members, which was made without it.
  void record_link(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version);
  // Folds the current round's reports into every member's rates; the next reports start a new
  // round. `slice_bytes`: the round's slices (the rates count what each slice cost besides its bytes).
  void close_round(uint32_t slice_bytes = 0);
  // The member left: its rates and the reports on it go.
  void forget(uint32_t member);

  // Which of `members` are slow, slowest last. Changes nothing: a re-plan mid-round asks again.
  SlowVerdict judge(const std::vector<uint32_t>& members) const;
  // A plan was made with `verdict`: its slow members are at the tails from now on.
  void adopt(const std::vector<uint32_t>& members, const SlowVerdict& verdict);

  std::optional<MemberRates> rates(uint32_t member) const;

  // The longest base round trip over the links of the last round that measured any, of those
  // `counted` picks (0: none): across sites, the WAN's (version_shape's WanPath). A report
  // counts for at most kMaxRoundTripSeconds.
  double longest_round_trip(const std::function<bool(uint32_t sender, uint32_t child)>& counted) const;
  // The lowest rate (bytes/s, its rails' measured rates summed) over the links of the last round
  // that measured any, of those `counted` picks (0: none): across sites, the slowest WAN link's,
  // which decides whether a version is worth compressing harder (wan_compression.h).
  double slowest_link_rate(const std::function<bool(uint32_t sender, uint32_t child)>& counted) const;
  // How the WAN into site `into` was last measured (`site` names each member's; the producer is
  // kProducerSender): the links from other sites into members of it in the last version that
  // measured any with a rate and a round trip, their rates summed (they ran side by side, sharing
  // the WAN into it) and their median round trip; nothing where none was. A later version too short
  // to measure those links (a small delta) leaves that measurement standing; one that measured some
  // of them counts those alone, and one re-planned around a cut counts the links before and after
  // the move as if side by side (up to twice the WAN: only a relay's new sprayer takes it, on top
  // of its LAN siblings' window). A rate past PathEstimate's bounds counts as the bound.
  std::optional<PathEstimate> wan_into(const std::string& into, const std::function<std::string(uint32_t)>& site) const;

 private:
  struct Report {
    uint32_t sender;
    LinkSample sample;
  };
  static bool usable(const LinkSample& sample);

  mutable std::mutex mu_;
  uint32_t slice_bytes_ = 0;  // of the last round that measured anyone
  std::map<uint32_t, MemberRates> members_;
  std::map<uint32_t, std::vector<Report>> round_;  // reports of the current round, by receiver
  std::map<std::pair<uint32_t, uint32_t>, double> round_trips_;  // (sender, child): of the last round with any
  std::map<std::pair<uint32_t, uint32_t>, double> link_rates_;   // (sender, child): of the last round with any
  // Every link's last measurement with a rate and a round trip, and its version (wan_into).
  struct MeasuredLink {
    PathEstimate path;
    uint64_t version = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, MeasuredLink> measured_links_;
  void note_link(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version);  // mu_ held
};

}  // namespace deltacast
