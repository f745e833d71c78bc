#include "broadcast/engine/plan/rate_book.h"

#include <algorithm>

namespace deltacast {

namespace {

// The upper median of `rates`, known for `rates.size()` of `population` members (0: not known;
// `population` 0: of whatever was measured).
// One outlier on busy cores moves it little. With half the members or fewer measured it is not
// known: in a short round only the links busy for longest are measured, the slowest ones (the
// producer's, still in slow start while it fed everyone: after a first version of 0.5 GB to 1,024
// simulated nodes, its two links alone, at a twentieth of the rails' rate, and the next version
// went in slices of 64 KiB instead of 448 KiB, 3.2x slower).
double upper_median(std::vector<double> rates, size_t population) {
  if (rates.empty() || 2 * rates.size() <= population) return 0;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

bool RateBook::usable(const LinkSample& sample) {
  return sample.slices >= kMinSamplesSlices && sample.busy_seconds >= kMinSampleSeconds && sample.rail_rate > 0;
}

void RateBook::record(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version) {
  if (child == kProducerSender || sender == child) return;
  std::lock_guard<std::mutex> lock(mu_);
  round_[child].push_back({sender, sample});
  note_link(sender, child, sample, version);
}

void RateBook::record_link(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version) {
  if (child == kProducerSender || sender == child) return;
  std::lock_guard<std::mutex> lock(mu_);
  note_link(sender, child, sample, version);
}

void RateBook::note_link(uint32_t sender, uint32_t child, const LinkSample& sample, uint64_t version) {
  const double round_trip = std::min(sample.round_trip, kMaxRoundTripSeconds);
  if (!usable(sample) || round_trip <= 0) return;
  auto& link = measured_links_[{sender, child}];
  if (version < link.version) return;  // an older version's report, late
  // A report is untrusted: a rate past any path's stands for the most a path may be taken at.
  link = {{std::min(sample.rail_rate, PathEstimate::kMaxBytesPerSecond), round_trip}, version};
}

void RateBook::close_round(uint32_t slice_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::pair<uint32_t, uint32_t>, double> round_trips, link_rates;
  for (const auto& [child, reports] : round_) {
    for (const Report& r : reports) {
      if (r.sample.round_trip > 0) round_trips[{r.sender, child}] = std::min(r.sample.round_trip, kMaxRoundTripSeconds);
      if (usable(r.sample)) link_rates[{r.sender, child}] = r.sample.rail_rate;
    }
  }
  if (!round_trips.empty()) round_trips_ = std::move(round_trips);
  if (!link_rates.empty()) link_rates_ = std::move(link_rates);
  // A sender whose several links all had slices waiting was limited by its own uplink: those
  // waits say nothing of its receivers.
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> by_sender;  // usable reports, backlogged ones
  for (const auto& [child, reports] : round_) {
    for (const Report& r : reports) {
      if (!usable(r.sample)) continue;
      auto& [links, waiting] = by_sender[r.sender];
      ++links;
      if (r.sample.backlogged_share() >= kBottleneckShare) ++waiting;
    }
  }
  const auto shared_uplink = [&](uint32_t sender) {
    const auto& [links, waiting] = by_sender[sender];
    return links >= 2 && waiting == links;
  };
  for (const auto& [child, reports] : round_) {
    double inbound = 0, waited_rate = 0;
    uint32_t waited_from = 0;
    bool measured = false, bottleneck = false;
    for (const Report& r : reports) {
      if (!usable(r.sample)) continue;
      measured = true;
      inbound += r.sample.rail_rate;
      const bool waited = r.sample.backlogged_share() >= kBottleneckShare && !shared_uplink(r.sender);
      if (waited && r.sample.rail_rate > waited_rate) {
        bottleneck = true;
        waited_rate = r.sample.rail_rate;
        waited_from = r.sender;
      }
    }
    if (!measured) continue;
    slice_bytes_ = slice_bytes;
    MemberRates& m = members_[child];
    ++m.rounds;
    m.inbound = inbound;
    if (bottleneck) {
      m.capacity = inbound;
      m.capacity_from = waited_from;
    } else if (!m.slow) {
      // It kept up: whatever made it slow is gone.
      m.capacity = 0;
      m.capacity_from = 0;
    }
    // A member at the tails that kept up keeps its capacity: it hangs from a healthy member there
    // (planner.h) and takes what it can at that member's pace, so its inbound rate (known()) is
    // what says it recovered. Keeping up proves nothing: links from a port throttled to 30%
    // seldom waited on two busy cores, and three such rounds sent it back into the chains,
    // slowing everyone once every four rounds.
  }
  round_.clear();
}

void RateBook::forget(uint32_t member) {
  std::lock_guard<std::mutex> lock(mu_);
  members_.erase(member);
  round_.erase(member);
  const auto touches = [&](const auto& link) { return link.first.first == member || link.first.second == member; };
  std::erase_if(round_trips_, touches);
  std::erase_if(link_rates_, touches);
  std::erase_if(measured_links_, touches);
}

SlowVerdict RateBook::judge(const std::vector<uint32_t>& members) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto rates_of = [&](uint32_t id) -> const MemberRates* {
    auto it = members_.find(id);
    return it == members_.end() ? nullptr : &it->second;
  };
  SlowVerdict verdict;
  std::vector<std::pair<double, uint32_t>> slow;  // (rate, id)
  // What the members not at the tails (but `except`) are known to take, and how many they are.
  const auto healthy_rates = [&](uint32_t except) {
    std::pair<std::vector<double>, size_t> out{{}, 0};
    for (uint32_t o : members) {
      const MemberRates* r = rates_of(o);
      if (o == except || (r != nullptr && r->slow)) continue;
      ++out.second;
      if (r != nullptr && r->known() > 0) out.first.push_back(r->known());
    }
    return out;
  };
  const auto [all_healthy, not_slow] = healthy_rates(kProducerSender);  // the producer is no member
  verdict.healthy = upper_median(all_healthy, not_slow);
  if (verdict.healthy == 0) verdict.partial = upper_median(all_healthy, 0);
  verdict.slice_bytes = slice_bytes_;
  for (uint32_t id : members) {
    const MemberRates* r = rates_of(id);
    if (r == nullptr || r->capacity <= 0) continue;  // never a bottleneck, or kept up since
    const double rate = r->known();
    // A sender about as slow as this member explains it (a port slow both ways), but only a
    // member not yet at the tails: there it is fed by whoever ends the chains, and a feeder held
    // back by this member's own pace (its relay buffers full) measures slow for that very reason.
    const MemberRates* sender = rates_of(r->capacity_from);
    if (!r->slow && r->capacity_from != kProducerSender && sender != nullptr && sender->capacity > 0 &&
        rate >= kSlowFraction * sender->known()) {
      continue;
    }
    auto [others, other_count] = healthy_rates(id);
    const double healthy = upper_median(std::move(others), other_count);
    const bool is_slow = healthy > 0 ? rate < (r->slow ? kRecoverFraction : kSlowFraction) * healthy
                                     : r->slow;  // nothing to compare with: it stays where it is
    if (is_slow) slow.emplace_back(rate, id);
  }
  std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;  // the slowest is the very last
  });
  for (const auto& [rate, id] : slow) verdict.slow.push_back(id);
  return verdict;
}

void RateBook::adopt(const std::vector<uint32_t>& members, const SlowVerdict& verdict) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t id : members) {
    const bool slow = std::find(verdict.slow.begin(), verdict.slow.end(), id) != verdict.slow.end();
    auto it = members_.find(id);
    if (it == members_.end()) {
      if (slow) members_[id].slow = true;
      continue;
    }
    it->second.slow = slow;
  }
}

double RateBook::longest_round_trip(const std::function<bool(uint32_t sender, uint32_t child)>& counted) const {
  std::lock_guard<std::mutex> lock(mu_);
  double longest = 0;
  for (const auto& [link, seconds] : round_trips_) {
    if (seconds > longest && counted(link.first, link.second)) longest = seconds;
  }
  return longest;
}

double RateBook::slowest_link_rate(const std::function<bool(uint32_t sender, uint32_t child)>& counted) const {
  std::lock_guard<std::mutex> lock(mu_);
  double slowest = 0;
  for (const auto& [link, rate] : link_rates_) {
    if ((slowest == 0 || rate < slowest) && counted(link.first, link.second)) slowest = rate;
  }
  return slowest;
}

std::optional<PathEstimate> RateBook::wan_into(const std::string& into,
                                               const std::function<std::string(uint32_t)>& site) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The links into the site from others, of the last version that measured any of them (an
  // older plan's links did not run beside these).
  uint64_t last = 0;
  double rate = 0;
  std::vector<double> round_trips;
  for (const auto& [link, measured] : measured_links_) {
    if (measured.version < last || site(link.second) != into || site(link.first) == into) continue;
    if (measured.version > last) {
      last = measured.version;
      rate = 0;
      round_trips.clear();
    }
    rate += measured.path.bytes_per_second;
    round_trips.push_back(measured.path.round_trip);
  }
  if (round_trips.empty()) return std::nullopt;
  std::nth_element(round_trips.begin(), round_trips.begin() + round_trips.size() / 2, round_trips.end());
  return PathEstimate{rate, round_trips[round_trips.size() / 2]};
}

std::optional<MemberRates> RateBook::rates(uint32_t member) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = members_.find(member);
  if (it == members_.end()) return std::nullopt;
  return it->second;
}

}  // namespace deltacast
