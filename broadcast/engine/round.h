// One round: a version's blob broadcast to a set of members, from the
// announcement until each target committed it, failed it or died. The
// producer feeds the head of every stripe; consumers forward down the stripes
// (chains or trees, planner.h). When a member dies (or fails) mid-round the stripes are recomputed
// without it, and every member's new parent is told what its new child
// already holds, so only missing slices move again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "broadcast/engine/membership.h"
#include "broadcast/engine/plan/planner.h"
#include "broadcast/engine/plan/rate_book.h"
#include "broadcast/engine/relay.h"

namespace deltacast {

struct RoundOptions {
  uint32_t stripes = 0;            // 0: as version_shape picks them for the shape
  uint32_t slice_bytes = 0;        // 0: from the alpha-beta model
  // 0: the shape the model finds fastest per version (docs/DESIGN.md, "Shapes"), as the simulator
  // chooses; 1: chains; k: trees k wide.
  uint32_t fanout = 0;
  // The producer's site: members naming another site take each version once per site, over
  // their site's WAN link (plan_trees); empty, like the members that name none.
  std::string site;
  double alpha_seconds = 100e-6;   // per-slice cost in that model
  double default_rate = 125e6;     // bytes/s assumed for slice sizing before anyone is measured
  // A WAN link between two sites found failed (a member across it reported unreachable by its
  // parent) is planned around for this long, in this round and the next, then tried again.
  Millis broken_link_memory{60000};
  // A standby link between sites reported unheard (standby_links.h) steers a detour at once; a new
  // plan routes around it once it has been unheard this long (a lost segment on an idle connection
  // waits out TCP's retransmission timeout, 200 ms or more, and is heard again).
  Millis unheard_to_plan{1000};
  Millis stall_timeout{10000};     // no progress anywhere for this long ends the round
  Millis timeout{0};               // 0: 30 s + bytes at 10 MB/s
};

struct RoundSpec {
  uint64_t transfer = 0;
  uint64_t version = 0;
  uint64_t base = 0;
  bool full = false;
  bool image = false;  // the data is the model image (a full version); else buckets
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  std::span<const uint64_t> leaves;  // content-hash leaf digests of the data, if known (else it is hashed)
  std::shared_ptr<const trust::LeafTags> leaf_tags;  // the data's leaf tags, if made (authenticated)
  std::vector<uint32_t> targets;
};

struct RoundResult {
  std::vector<uint32_t> committed;
  std::vector<uint32_t> failed;  // failed the version, or did not finish in time
  std::vector<uint32_t> lost;    // died mid-round
  // Per target in `failed` or `lost`, by name: why it did not finish (its own report of the
  // failure, or where it stood when the round gave up on it). One that had left before the round
  // began is unnamed here: "#<id>".
  std::map<std::string, std::string> why_not;
  double staged_seconds = 0;     // start until every surviving target staged (verified) it
  double seconds = 0;            // start until every surviving target committed it
  double max_apply_seconds = 0;
  std::map<uint32_t, double> staged_at;  // per target: seconds from the start until it staged the version
  uint32_t slice_bytes = 0;
  uint32_t stripes = 0;
  uint32_t fanout = 1;  // the shape it went out in (1: chains)
  uint32_t replans = 0;
  // Of the re-plans, those made on the standby links' word (an early report they agreed with, or
  // a detour they found cut), before the parents' full reports.
  uint32_t standby_replans = 0;
  Plan first_plan;
};

// How far the round in flight is: its targets' bytes as they report them (every 100 ms).
struct RoundProgress {
  uint64_t version = 0;
  bool full = false;
  uint64_t bytes = 0;           // the version's bytes (each target's share of the work)
  uint32_t targets = 0;
  uint32_t staged = 0;          // received and verified it (committed ones included)
  uint32_t committed = 0;
  uint64_t received_bytes = 0;  // over every target, each counted up to `bytes`
  double seconds = 0;           // since the round started

  // Share of the whole round's bytes that arrived (0 before any).
  double fraction() const {
    const double all = static_cast<double>(bytes) * targets;
    return all > 0 ? static_cast<double>(received_bytes) / all : 0.0;
  }
  // Bytes per second into all targets together, so far.
  double rate() const { return seconds > 0 ? static_cast<double>(received_bytes) / seconds : 0.0; }
  // Seconds until every target holds the version at the rate so far (-1: no byte yet).
  double eta_seconds() const {
    const double f = fraction();
    return f > 0 ? seconds * (1.0 - f) / f : -1.0;
  }
};

// Runs rounds for one producer; `relay` is the producer's own (it holds every slice). Plans put
// the members the rate book finds slow at the tails; at the end of every round the producer's
// own links are reported to the book and the round's reports are folded in.
class RoundDriver {
 public:
  // `hash_pool` computes each round's slice checksums (once, on the producer: relays and
  // consumers forward and verify these).
  RoundDriver(Membership& membership, Relay& relay, RateBook& rates, RoundOptions options, ThreadPool& hash_pool)
      : membership_(membership), relay_(relay), rates_(rates), options_(options), hash_pool_(hash_pool) {}

  // Blocks until the round ends; `stop` is polled.
  RoundResult run(const RoundSpec& spec, const std::function<bool()>& stop);
  // The round in flight, if one is (any thread).
  std::optional<RoundProgress> progress() const;

 private:
  struct InFlight {
    uint64_t version = 0;
    uint64_t transfer = 0;
    bool full = false;
    uint64_t bytes = 0;
    uint32_t slice_bytes = 0;
    std::vector<uint32_t> targets;  // sorted
    std::chrono::steady_clock::time_point start;
  };
  mutable std::mutex in_flight_mu_;
  std::optional<InFlight> in_flight_;

  // WAN links found failed lately, each with when (RoundOptions::broken_link_memory).
  BrokenLinks recent_broken_links();
  void note_broken_link(const std::string& from, const std::string& into);
  // The WAN links a plan and its detours avoid: those found failed lately, and those between the
  // sites of sentinels that have not heard each other on their standby links (standby_links.h)
  // for at least `unheard_for` (the producer is its own site's sentinel).
  BrokenLinks links_to_avoid(Millis unheard_for);
  std::mutex broken_mu_;
  std::map<std::pair<std::string, std::string>, std::chrono::steady_clock::time_point> broken_links_;

  Membership& membership_;
  Relay& relay_;
  RateBook& rates_;
  RoundOptions options_;
  ThreadPool& hash_pool_;
};

}  // namespace deltacast
