#include "broadcast/transport/rail_estimator.h"

#include <algorithm>
#include <cmath>

namespace deltacast {

double link_rail_rate(std::vector<double> measured_rates, size_t live_rails) {
  if (measured_rates.empty()) return 0;
  double sum = 0;
  for (double rate : measured_rates) sum += rate;
  const size_t unmeasured = live_rails > measured_rates.size() ? live_rails - measured_rates.size() : 0;
  std::nth_element(measured_rates.begin(), measured_rates.begin() + measured_rates.size() / 2, measured_rates.end());
  return sum + static_cast<double>(unmeasured) * measured_rates[measured_rates.size() / 2];
}

void RailEstimator::assume_path(double bytes_per_second, double round_trip) {
  const bool known = bytes_per_second > 0 && std::isfinite(bytes_per_second) && round_trip > 0 && std::isfinite(round_trip);
  path_rate_ = known ? bytes_per_second : 0;
  path_round_trip_ = known ? round_trip : 0;
}

void RailEstimator::on_post(uint32_t bytes, TimePoint now) {
  if (inflight_ == 0) busy_since_ = now;  // busy again
  inflight_ += bytes;
}

double RailEstimator::busy_total(TimePoint now) const {
  return busy_total_ + (inflight_ > 0 ? seconds(now - busy_since_) : 0.0);
}

void RailEstimator::on_done(uint32_t bytes, bool ok, TimePoint expected, TimePoint now, TimePoint posted) {
  inflight_ -= std::min<uint64_t>(inflight_, bytes);
  if (inflight_ == 0) busy_total_ += seconds(now - busy_since_);  // the rail goes idle: bank its busy time
  if (!ok) return;
  delivered_total_ += bytes;
  const double late = std::max(0.0, seconds(now - expected));
  late_dev_ = 0.75 * late_dev_ + 0.25 * std::abs(late - late_mean_);
  late_mean_ = 0.875 * late_mean_ + 0.125 * late;
  if (posted != TimePoint::min()) base_delay_ = std::min(base_delay_, seconds(now - posted));
  const double busy_now = busy_total(now);
  if (delivered_total_ == bytes && bandwidth_ == 0 && path_round_trip_ > 0) {
    // The rail's first delivery: an assumed path's first sample counts from here, the round trip
    // before it was the window filling the path, not the path's rate.
    sample_busy_mark_ = busy_now;
    sample_delivered_mark_ = delivered_total_;
    return;
  }
  ++sample_slices_;
  const double busy = busy_now - sample_busy_mark_;
  const bool first_done = bandwidth_ == 0 && sample_slices_ >= kFirstSampleSlices && busy > 0;
  if (first_done || busy >= std::chrono::duration<double>(kSampleWindow).count()) {
    const double sample = static_cast<double>(delivered_total_ - sample_delivered_mark_) / busy;
    bandwidth_ = bandwidth_ == 0 ? sample : 0.7 * bandwidth_ + 0.3 * sample;
    sample_busy_mark_ = busy_now;
    sample_delivered_mark_ = delivered_total_;
    sample_slices_ = 0;
  }
}

std::chrono::milliseconds RailEstimator::deadline(uint32_t bytes, double factor, std::chrono::milliseconds min_margin,
                                                  std::chrono::milliseconds first, uint32_t initial_window) const {
  if (bandwidth_ == 0 && path_round_trip_ == 0) return first;
  // Plus the rail's round trip: the prediction counts bytes at the rate, not the propagation
  // both ways, and across a WAN of 40 ms a margin of 30 ms failed every slice before the lateness
  // average had learnt the delay (the rails flapped to probing and their receivers fell silent).
  // And a round trip more per doubling of a cold connection's window: TCP restarts slow start on
  // a new connection and on one idle past its retransmission timeout (between two versions), and
  // across a 40 ms WAN the 128 KiB probe on a fresh connection took four round trips against a
  // deadline of about two. Each expiry reset the connection, so the next probe was cold again and
  // the rail stayed paused for good (a relay's child across the WAN starved, and the round stalled).
  // (The base delay also holds a slice's own time, so on a LAN with 4 MiB slices a round trip
  // here is 34 ms where the wire's is 0.1 ms: such a LAN rail's deadline is about doubled. Taking
  // the slice's time at the measured rate out of it failed across the WAN: a rail measured low
  // there was left two round trips short again, and the namespace test of sites failed 2 runs
  // of 4.)
  const double margin = std::max(std::chrono::duration<double>(min_margin).count(), late_mean_ + 4 * late_dev_) +
                        round_trip() * (1 + slow_start_round_trips(inflight_ + bytes, initial_window));
  const auto span = std::chrono::milliseconds(static_cast<int64_t>(1000 * (factor * predicted_seconds(bytes) + margin)));
  // An assumed path's figures were another link's (the same WAN into the same site, from another
  // sender): until this one is measured, never less than `first`.
  return bandwidth_ == 0 ? std::max(span, first) : span;
}

uint32_t RailEstimator::slow_start_round_trips(uint64_t bytes, uint32_t initial_window) {
  if (initial_window == 0) return 0;
  uint32_t rounds = 0;
  for (uint64_t sent = initial_window, window = initial_window; sent < bytes && rounds < 64; ++rounds) {
    window *= 2;
    sent += window;
  }
  return rounds;
}

bool RailEstimator::has_room(uint32_t bytes, uint32_t slice_bytes, std::chrono::milliseconds queue_target) const {
  const double known = bandwidth_ > 0 ? bandwidth_ : assumed_ > 0 ? assumed_ : path_rate_;
  // The delay's share only where the round trip is longer than the queue target and a slice's
  // time at the rate (a WAN: on a LAN the round trip is about a slice's own time, and the window
  // is as it was), and only at a measured rate: an assumed one (a NIC's, from its other rails)
  // times a WAN's round trip opened windows of gigabytes that queued whole versions at the link.
  // One slice's time, not two: a rail measured at two slices a round trip (slow start with
  // nothing assumed: a relay's first child has no sibling to take a rate from) must pass, or its
  // window stays at two slices for good (a cut-off site's detour crawled at 0.54 GB/s for 6 s
  // across a 12.5 GB/s simulated WAN link). (This looser test once let more rails widen and queue
  // at the WAN link, 1.75x a version's bytes into a site against 1.02x; since deadlines add the
  // round trip, 64 simulated consumers in 4 sites take at most 1.005x.)
  if (known == 0) return inflight_ == 0 || inflight_ + bytes <= 2.0 * slice_bytes;
  const double target = std::chrono::duration<double>(queue_target).count();
  const double delay = round_trip() > target + 1.0 * slice_bytes / known ? 2 * round_trip() : 0.0;
  // The round trip's share at a measured rate, or at an assumed path's (not a NIC's: above).
  const double path_rate = bandwidth_ > 0 ? bandwidth_ : path_rate_;
  const double window = std::max(2.0 * slice_bytes, known * target + path_rate * delay);
  return inflight_ == 0 || static_cast<double>(inflight_ + bytes) <= window;
}

}  // namespace deltacast
