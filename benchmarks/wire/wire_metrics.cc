#include "wire/wire_metrics.h"

#include <algorithm>

namespace deltacast::bench {

namespace {
double ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
}  // namespace

double max_prefix_stall_ms(const std::vector<TimePoint>& arrival, TimePoint start) {
  double worst = 0;
  TimePoint prefix_time = start;  // when the prefix last grew
  TimePoint running = start;      // latest arrival among slices [0, i]
  for (const TimePoint t : arrival) {
    running = std::max(running, t);
    if (running > prefix_time) {
      worst = std::max(worst, ms(running - prefix_time));
      prefix_time = running;
    }
  }
  return worst;
}

double max_arrival_gap_ms(std::vector<TimePoint> arrival, TimePoint start) {
  std::sort(arrival.begin(), arrival.end());
  double worst = 0;
  TimePoint last = start;
  for (const TimePoint t : arrival) {
    worst = std::max(worst, ms(t - last));
    last = t;
  }
  return worst;
}

std::optional<double> first_ack_after_ms(const std::vector<SprayEvent>& events, uint32_t rail, TimePoint from) {
  for (const auto& e : events) {
    if (e.kind == SprayEvent::kAcked && e.rail == rail && e.at >= from) return ms(e.at - from);
  }
  return std::nullopt;
}

double send_share(const std::vector<SprayEvent>& events, uint32_t rail, TimePoint from, TimePoint until) {
  double mine = 0, all = 0;
  for (const auto& e : events) {
    if (e.kind != SprayEvent::kSent || e.at < from || e.at >= until) continue;
    all += e.bytes;
    if (e.rail == rail) mine += e.bytes;
  }
  return all > 0 ? mine / all : 0;
}

std::vector<std::vector<double>> rail_timeline(const std::vector<SprayEvent>& events, size_t rails, TimePoint start,
                                               TimePoint end, SteadyClock::duration bin) {
  if (bin <= SteadyClock::duration::zero() || end <= start) return std::vector<std::vector<double>>(rails);
  const auto bins = static_cast<size_t>((end - start + bin - SteadyClock::duration(1)) / bin);
  std::vector<std::vector<double>> gbps(rails, std::vector<double>(bins, 0.0));
  const double bin_seconds = std::chrono::duration<double>(bin).count();
  for (const auto& e : events) {
    if (e.kind != SprayEvent::kAcked || e.rail >= rails || e.at < start || e.at >= end) continue;
    gbps[e.rail][static_cast<size_t>((e.at - start) / bin)] += 8.0 * e.bytes / bin_seconds / 1e9;
  }
  return gbps;
}

}  // namespace deltacast::bench
