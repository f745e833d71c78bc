#include "broadcast/planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>

namespace deltacast {

uint32_t Plan::child(uint32_t id, uint32_t stripe) const {
  const auto& chain = chains[stripe];
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (chain[i] == id) return chain[i + 1];
  }
  return 0;
}

uint32_t default_stripes(size_t consumers) { return static_cast<uint32_t>(std::clamp<size_t>(consumers, 1, 4)); }

Plan plan_chains(std::vector<PlanMember> members, uint32_t stripes, double reference) {
  Plan plan;
  if (members.empty() || stripes == 0) return plan;
  // Members measured as a bottleneck at well under the healthy rate (of the others, or
  // remembered) are leaves; the rest rotate. (When the parents themselves are the limit, every
  // link looks like a bottleneck at about the same rate, and nobody is moved.)
  // A member as slow as the parent that measured it is explained by that parent.
  std::map<uint32_t, double> rate_of;
  for (const auto& m : members) rate_of[m.id] = m.rate;
  std::set<uint32_t> explained;
  for (const auto& m : members) {
    auto parent = rate_of.find(m.rate_from);
    const bool as_slow = parent != rate_of.end() && parent->second > 0 && m.rate >= kSlowFraction * parent->second;
    if (m.rate_from != 0 && as_slow) explained.insert(m.id);
  }
  // The yardstick for one member: the median rate of the others measured as bottlenecks in their
  // own right (a median, so that one lucky or unlucky link on busy cores moves nobody), or the
  // remembered healthy rate when none was.
  const auto yardstick = [&](const PlanMember& m) {
    std::vector<double> rates;
    for (const auto& o : members) {
      if (o.id != m.id && o.rate > 0 && !o.slow && !explained.count(o.id)) rates.push_back(o.rate);
    }
    return rates.empty() ? reference : upper_median(std::move(rates));
  };
  std::vector<PlanMember> fast, slow;
  for (const auto& m : members) {
    bool is_slow = false;
    if (m.rate > 0 && !explained.count(m.id)) {
      const double healthy = yardstick(m);
      if (healthy > 0) {
        is_slow = m.rate < (m.slow ? kRecoverFraction : kSlowFraction) * healthy;
      } else {
        is_slow = m.slow;  // nothing to compare with: it stays where it is
      }
    }
    (is_slow ? slow : fast).push_back(m);
  }
  std::sort(fast.begin(), fast.end(), [](const PlanMember& a, const PlanMember& b) { return a.id < b.id; });
  std::sort(slow.begin(), slow.end(), [](const PlanMember& a, const PlanMember& b) {
    return a.rate != b.rate ? a.rate > b.rate : a.id < b.id;  // the slowest is the very last
  });
  plan.chains.resize(stripes);
  for (uint32_t s = 0; s < stripes; ++s) {
    auto& chain = plan.chains[s];
    const size_t shift = fast.empty() ? 0 : (s * fast.size() / stripes) % fast.size();
    for (size_t i = 0; i < fast.size(); ++i) chain.push_back(fast[(i + shift) % fast.size()].id);
    for (const auto& m : slow) chain.push_back(m.id);
  }
  for (const auto& m : slow) plan.slow.push_back(m.id);
  return plan;
}

double next_reference_rate(double reference, const std::vector<PlanMember>& members, const Plan& plan) {
  std::vector<double> rates;
  for (const auto& m : members) {
    const bool slow = std::find(plan.slow.begin(), plan.slow.end(), m.id) != plan.slow.end();
    if (m.rate > 0 && !slow) rates.push_back(m.rate);
  }
  if (rates.empty()) return reference;
  const double healthy = upper_median(std::move(rates));
  return healthy >= reference ? healthy : 0.5 * (reference + healthy);
}

double upper_median(std::vector<double> rates) {
  if (rates.empty()) return 0;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

std::optional<double> receiver_rate(const LinkSample& sample) {
  if (!sample.measured) return std::nullopt;
  return sample.backlogged_share >= kBottleneckShare ? sample.rate : 0.0;
}

double smoothed_rate(double old_rate, double sample) {
  if (sample <= 0) return 0;  // kept up: whatever made it slow is gone
  if (old_rate <= 0 || sample < kSlowFraction * old_rate) return sample;
  return 0.5 * (old_rate + sample);
}

uint32_t alpha_beta_slice_bytes(uint64_t bytes, uint32_t hops, double alpha_seconds, double beta_bytes_per_second,
                                uint32_t min_bytes, uint32_t max_bytes) {
  if (bytes == 0) return min_bytes;
  const double pieces = std::sqrt(std::max<double>(1, hops - 1) * static_cast<double>(bytes) /
                                  std::max(1e-12, alpha_seconds * beta_bytes_per_second));
  const double size = static_cast<double>(bytes) / std::max(1.0, pieces);
  const uint64_t rounded = std::bit_floor(static_cast<uint64_t>(std::max(1.0, size)));
  return static_cast<uint32_t>(std::clamp<uint64_t>(rounded, min_bytes, max_bytes));
}

}  // namespace deltacast
