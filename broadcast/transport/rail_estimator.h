// What the sprayer believes about one rail's speed: its delivery rate,
// measured over the time the rail had something in flight (waiting for the
// sprayer does not dilute the rate of the link itself), the bytes it has in
// flight, and how much later than predicted its acknowledgements come
// (smoothed like TCP's RTT, so that a deadline grows on a jittery rail
// instead of firing falsely). Time is passed in: tests drive it with a clock
// of their own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "broadcast/transport/rail_health.h"

namespace deltacast {

// A link's rate over its rails: the rates of the rails measured in one transfer, summed, and each
// of the others still live (`live_rails` in all) counted at the upper median of the measured ones: they
// share the same NICs, and a sprayer leaves a rail whose rate it does not know yet nearly idle
// beside measured ones. Left out, a short transfer's link summed 2 or 3 of its 8 rails (a first
// version of 0.75 GB to 1,024 simulated nodes measured them at 0.28x the rails' rate, and the
// next version went in slices half the size, 1.46x slower). 0 when none was measured.
double link_rail_rate(std::vector<double> measured_rates, size_t live_rails);

// A path's rate and round trip as measured before by whoever knows it: the round's last measurement
// of a link across the same WAN into the same site, given to a relay for a new child there.
struct PathEstimate {
  // What a path may be taken at (a plan's paths come over the control plane, untrusted): from
  // 100 KB/s (below it a window's time overflows what a deadline can hold) to 10 TB/s, a round
  // trip of up to 10 s.
  static constexpr double kMinBytesPerSecond = 1e5;
  static constexpr double kMaxBytesPerSecond = 1e13;
  static constexpr double kMaxRoundTrip = 10;

  double bytes_per_second = 0;  // the link's, its rails together
  double round_trip = 0;        // seconds
  // Within the bounds above (NaN is not).
  bool known() const {
    return bytes_per_second >= kMinBytesPerSecond && bytes_per_second <= kMaxBytesPerSecond && round_trip > 0 &&
           round_trip <= kMaxRoundTrip;
  }
};

class RailEstimator {
 public:
  // Before a rail's rate is measured it is assumed to be 1 Gbit/s: enough to fill it, and the
  // first samples replace the guess within a few tens of milliseconds.
  static constexpr double kAssumedBandwidth = 125e6;
  // A rate sample spans at least this much busy time.
  static constexpr std::chrono::milliseconds kSampleWindow{20};
  // ... except the first, which ends as soon as this many slices were delivered: a fast rail
  // carries 20 ms of busy time only after a gigabyte or more, and until its first sample it is
  // held to two slices at a time (has_room) and looks slow to the sprayer's choice, so it would
  // stay in slow start for a whole large transfer beside rails that were measured.
  static constexpr uint32_t kFirstSampleSlices = 16;

  // Bytes per second, 0 until measured.
  double bandwidth() const { return bandwidth_; }
  // The measured rate, or the path's before the first sample (assume_path), or the assumed one.
  double rate() const { return bandwidth_ > 0 ? bandwidth_ : path_rate_ > 0 ? path_rate_ : assumed(); }
  // Before the first sample, take the rail at `bytes_per_second` instead of the 1 Gbit/s guess
  // (what other sprayers measured over the same local NICs): its window is that rate's
  // queue_target, not slow start's two slices. Deadlines still wait for a measurement, and the
  // first sample replaces the assumption outright.
  void assume(double bytes_per_second) { assumed_ = bytes_per_second > 0 ? bytes_per_second : 0; }
  double assumed() const { return assumed_ > 0 ? assumed_ : kAssumedBandwidth; }
  bool assuming() const { return assumed_ > 0; }
  // Before the first sample, also take the rail as its path was measured: `bytes_per_second` of
  // it over a round trip of `round_trip` seconds (a cut-off site's detour: the WAN into that site
  // as the round measured it last version). A NIC's rate (assume) times a WAN's round trip would
  // open windows of gigabytes; a path's rate times its round trip is what the path holds. So the
  // window gets the round trip's share at the path's rate at once, on top of the queue target's
  // share at the assumed rate (has_room); deadlines count the round trip, never less than `first`
  // until measured; and the first sample starts at the first acknowledgement, not at the first
  // post, so that it measures the path's rate rather than the round trip the window spent filling.
  // Without it, a relay's new child across a 100 Gbit/s WAN started at a queue target's worth of
  // its LAN siblings' rate and grew from there: a simulated site's detour in chains added 1.5-1.7 s
  // to a 2.8 GB version, against 0.5 s with it.
  void assume_path(double bytes_per_second, double round_trip);
  uint64_t inflight() const { return inflight_; }
  // Totals since the rail was made: bytes delivered, and seconds with something in flight (what
  // a sender compares before and after one transfer, to rate the rail in that transfer alone).
  uint64_t delivered_total() const { return delivered_total_; }
  double busy_total(TimePoint now) const;

  // A copy of `bytes` goes out now.
  void on_post(uint32_t bytes, TimePoint now);
  // A copy finished: delivered (`ok`) or failed. `expected`: its predicted completion; `posted`:
  // when it went out (TimePoint::min(): not known).
  void on_done(uint32_t bytes, bool ok, TimePoint expected, TimePoint now, TimePoint posted = TimePoint::min());

  // The shortest a copy took from its post to its acknowledgement (seconds): the rail's round
  // trip with nothing queued ahead (propagation both ways, a slice's own time). 0 before any copy was delivered. The least ever seen: a window larger than the
  // link's bytes in flight queues slices in it, and a recent minimum would then grow with the
  // window it sizes.
  double base_delay() const { return base_delay_ < kNoDelay ? base_delay_ : 0; }
  // The base delay, or the path's assumed round trip before any copy was delivered (0: neither).
  double round_trip() const { return base_delay_ < kNoDelay ? base_delay_ : path_round_trip_; }
  // Seconds until `bytes` more would be delivered behind what is in flight.
  double predicted_seconds(uint32_t bytes) const { return static_cast<double>(inflight_ + bytes) / rate(); }
  // The same, taking an unmeasured rail at `unmeasured_rate` (a measured sibling's, say) instead
  // of the guess.
  double predicted_seconds(uint32_t bytes, double unmeasured_rate) const {
    return static_cast<double>(inflight_ + bytes) / (bandwidth_ > 0 ? bandwidth_ : unmeasured_rate);
  }
  // How long a copy of `bytes` posted now is given: `factor` times its predicted completion plus
  // a margin of at least `min_margin` (more on a jittery rail) plus the base delay (a WAN's round
  // trip), once more for each round trip a cold connection's slow start needs for what is in
  // flight (`initial_window`: what the connection sends in its first round trip; 0 where the
  // transport has no slow start), or `first` before the rail's rate is measured (unless its path is
  // assumed: assume_path).
  std::chrono::milliseconds deadline(uint32_t bytes, double factor, std::chrono::milliseconds min_margin,
                                     std::chrono::milliseconds first, uint32_t initial_window = 0) const;
  // Round trips a connection sending `bytes` from a window of `initial_window` that doubles each
  // round trip needs beyond the first (0 where `initial_window` is 0: no slow start).
  static uint32_t slow_start_round_trips(uint64_t bytes, uint32_t initial_window);
  // Whether `bytes` more may go in flight: up to `queue_target` worth of the rail's rate, plus
  // twice its base delay's worth where that is longer than the target and a slice's time (a
  // WAN's round trip), at least two slices; two slices at a time before the rate is
  // measured and while nothing is assumed (slow start, so that an unknown slow rail cannot
  // swallow a large share before its first acks tell its speed). The base delay keeps a long
  // link full: across a WAN of 80 ms each way a window of 8 ms of the rate delivered a twentieth
  // of it and measured that as the rail's rate (a sparse version to 4 simulated sites: 6.2 s
  // against 0.4 s over the WAN links' rate); twice the delay lets the measured rate double per
  // sample until the link is full, as slow start does.
  bool has_room(uint32_t bytes, uint32_t slice_bytes, std::chrono::milliseconds queue_target) const;

 private:
  double bandwidth_ = 0;
  double assumed_ = 0;  // 0: nothing assumed (the guess, in slow start)
  double path_rate_ = 0;           // assume_path's rate (0: none)
  double path_round_trip_ = 0;     // > 0: assumed with the path's round trip (assume_path)
  uint64_t inflight_ = 0;
  static constexpr double kNoDelay = 1e300;
  double base_delay_ = kNoDelay;
  double late_mean_ = 0;     // seconds
  double late_dev_ = 0;
  uint64_t delivered_total_ = 0;
  TimePoint busy_since_{};   // start of the current busy stretch
  double busy_total_ = 0;    // banked busy time of finished stretches
  // The totals when the current rate sample began.
  uint32_t sample_slices_ = 0;
  uint64_t sample_delivered_mark_ = 0;
  double sample_busy_mark_ = 0;
};

}  // namespace deltacast
