// The rail estimator's rate samples: the first one ends after a handful of slices, so that a fast
// rail leaves slow start long before it has been busy for a whole sample window; later samples
// span the window, so that one short burst does not swing the rate.
#include "broadcast/transport/rail_estimator.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

using std::chrono::microseconds;

// Delivers `slices` slices of `bytes` back to back at `rate` bytes/s from `t`, one in flight.
TimePoint deliver(RailEstimator& e, TimePoint t, uint32_t slices, uint32_t bytes, double rate) {
  const auto each = std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(bytes / rate));
  for (uint32_t i = 0; i < slices; ++i) {
    e.on_post(bytes, t);
    t += each;
    e.on_done(bytes, true, t, t);
  }
  return t;
}

TEST(RailEstimator, AFastRailIsMeasuredAfterItsFirstSlicesNotAfterAWholeWindow) {
  RailEstimator e;
  const uint32_t slice = 4 << 20;
  // 15 slices at 50 GB/s: 1.3 ms of busy time, far from the 20 ms window; not measured yet.
  TimePoint t = deliver(e, TimePoint{}, RailEstimator::kFirstSampleSlices - 1, slice, 50e9);
  EXPECT_EQ(e.bandwidth(), 0);
  // Slow start: with two slices in flight, no room for a third.
  e.on_post(2 * slice, t);
  EXPECT_FALSE(e.has_room(slice, slice, std::chrono::milliseconds(8)));
  t += std::chrono::microseconds(168);
  e.on_done(2 * slice, true, t, t);
  EXPECT_NEAR(e.bandwidth(), 50e9, 1e9) << "measured after its first 16 slices";
  e.on_post(2 * slice, t);
  EXPECT_TRUE(e.has_room(slice, slice, std::chrono::milliseconds(8)));
}

TEST(RailEstimator, LaterSamplesSpanTheWindowSoAShortBurstDoesNotSwingTheRate) {
  RailEstimator e;
  const uint32_t slice = 64 << 10;
  TimePoint t = deliver(e, TimePoint{}, RailEstimator::kFirstSampleSlices, slice, 100e6);
  ASSERT_NEAR(e.bandwidth(), 100e6, 1e5);
  // 16 more slices at 10x the rate: under the window, so the rate stands.
  t = deliver(e, t, RailEstimator::kFirstSampleSlices, slice, 1e9);
  EXPECT_NEAR(e.bandwidth(), 100e6, 1e5);
  // Once a whole window of the faster rate is in, the rate moves towards it.
  deliver(e, t, 400, slice, 1e9);
  EXPECT_GT(e.bandwidth(), 300e6);
}

TEST(RailEstimator, AnAssumedRateOpensTheWindowUntilTheFirstSampleReplacesIt) {
  RailEstimator e;
  const uint32_t slice = 4 << 20;
  const auto target = std::chrono::milliseconds(8);
  e.assume(50e9);  // what the node's other sprayers measured: 400 MB in 8 ms
  EXPECT_EQ(e.bandwidth(), 0) << "an assumption is not a measurement";
  EXPECT_EQ(e.rate(), 50e9);
  e.on_post(80 * slice, TimePoint{});
  EXPECT_TRUE(e.has_room(slice, slice, target)) << "held to slow start's two slices despite the assumed rate";
  e.on_post(15 * slice, TimePoint{});
  EXPECT_FALSE(e.has_room(slice, slice, target)) << "more than queue_target of the assumed rate in flight";
  EXPECT_EQ(e.deadline(slice, 3.0, std::chrono::milliseconds(30), std::chrono::milliseconds(500)),
            std::chrono::milliseconds(500))
      << "deadlines wait for a measurement";
  e.on_done(95 * slice, false, TimePoint{}, TimePoint{});
  // The child turns out slower: its first sample replaces the assumption, not blends with it.
  deliver(e, TimePoint{}, RailEstimator::kFirstSampleSlices, slice, 5e9);
  EXPECT_NEAR(e.bandwidth(), 5e9, 1e8);
}

// A long round trip: a rail whose slices take 100 ms more than their bytes' time (a WAN) holds
// its queue target's worth of its rate plus twice that round trip's, so that a window does not
// cap it at a fraction of the link; on a LAN rail, where the round trip is about a slice's own
// time, the window is the queue target's alone.
TEST(RailEstimator, ALongRoundTripWidensTheWindowAndALanRailsStaysAsItWas) {
  const uint32_t slice = 1 << 20;
  const auto target = std::chrono::milliseconds(8);
  RailEstimator wan;
  TimePoint t{};
  // Eight slices a round trip (1 ms of bytes each at 1 GB/s, 100 ms of round trip), so the rate
  // measured is what that window carries.
  for (uint32_t i = 0; i < 4; ++i) {
    for (int k = 0; k < 8; ++k) wan.on_post(slice, t);
    const TimePoint posted = t;
    t += std::chrono::milliseconds(101);
    for (int k = 0; k < 8; ++k) wan.on_done(slice, true, t, t, posted);
  }
  ASSERT_GT(wan.bandwidth(), 0);
  EXPECT_NEAR(wan.base_delay(), 0.101, 1e-6);
  const double rate = wan.bandwidth();
  // Room up to rate x (8 ms + 202 ms), not rate x 8 ms: the next round trip carries twice.
  wan.on_post(static_cast<uint32_t>(rate * 0.190), t);
  EXPECT_TRUE(wan.has_room(slice, slice, target));
  wan.on_post(static_cast<uint32_t>(rate * 0.030), t);
  EXPECT_FALSE(wan.has_room(slice, slice, target));

  RailEstimator lan;
  t = TimePoint{};
  for (uint32_t i = 0; i < RailEstimator::kFirstSampleSlices; ++i) {
    lan.on_post(slice, t);
    const TimePoint posted = t;
    t += std::chrono::microseconds(1100);  // 1 ms of bytes, 100 us of round trip
    lan.on_done(slice, true, t, t, posted);
  }
  const double lan_rate = lan.bandwidth();
  lan.on_post(static_cast<uint32_t>(lan_rate * 0.0075), t);
  EXPECT_TRUE(lan.has_room(static_cast<uint32_t>(lan_rate * 0.0004), slice, target));
  EXPECT_FALSE(lan.has_room(static_cast<uint32_t>(lan_rate * 0.0010), slice, target)) << "8 ms of its rate, no more";
}

// Nothing assumed (a relay's first child, no sibling to take a rate from): two slices a round
// trip, so the rate measured is two slices per round trip and two slices' time at it is the
// round trip itself. The window must grow from there all the same; it stayed at two slices per
// rail for good, and a site's detour in the simulator crawled at 0.54 GB/s for 6 s across a
// 12.5 GB/s WAN link (64 consumers, 4 sites).
TEST(RailEstimator, ARailInSlowStartAcrossAWanGrowsItsWindow) {
  const uint32_t slice = 1 << 20;
  const auto target = std::chrono::milliseconds(8);
  RailEstimator wan;
  TimePoint t{};
  for (uint32_t i = 0; i < RailEstimator::kFirstSampleSlices; ++i) {
    wan.on_post(slice, t);
    wan.on_post(slice, t);
    const TimePoint posted = t;
    t += std::chrono::milliseconds(100);
    wan.on_done(slice, true, t, t, posted);
    wan.on_done(slice, true, t, t, posted);
  }
  ASSERT_GT(wan.bandwidth(), 0);
  EXPECT_NEAR(wan.bandwidth(), 2.0 * slice / 0.1, 0.01 * 2.0 * slice / 0.1);
  wan.on_post(slice, t);
  wan.on_post(slice, t);
  EXPECT_TRUE(wan.has_room(slice, slice, target)) << "a third slice, and more: twice the round trip's worth";
  wan.on_post(slice, t);
  wan.on_post(slice, t);
  EXPECT_FALSE(wan.has_room(slice, slice, target)) << "about four slices a round trip, twice what it carried";
}

// A relay's new child across a WAN, with the path the round measured into the child's site: the
// window holds the path's round trip's worth at once (on top of a queue target's worth of the NIC
// rate its LAN siblings measured), and the first sample, counted from the first acknowledgement,
// measures the path's rate. Without the path, the window was the queue target's worth alone, and a
// sample counted from the first post took in the round trip the window spent filling: a simulated
// site's detour in chains cost 1.5-1.7 s more than with it.
TEST(RailEstimator, AnAssumedPathOpensItsRoundTripsWorthAndIsMeasuredFromItsFirstAck) {
  const uint32_t slice = 1 << 20;
  const auto target = std::chrono::milliseconds(8);
  const double nic = 6e9, path = 0.75e9, round_trip = 0.136;
  RailEstimator lan_only, with_path;
  lan_only.assume(nic);
  with_path.assume(nic);
  with_path.assume_path(path, round_trip);
  EXPECT_EQ(lan_only.round_trip(), 0);
  EXPECT_DOUBLE_EQ(with_path.round_trip(), round_trip) << "assumed until a copy comes back";
  // 48 MB of the NIC's rate in 8 ms; plus 0.75 GB/s for two round trips, 204 MB.
  const uint32_t lan_window = static_cast<uint32_t>(nic * 0.008);
  const uint32_t path_window = static_cast<uint32_t>(nic * 0.008 + path * 2 * round_trip);
  lan_only.on_post(lan_window - slice, TimePoint{});
  with_path.on_post(lan_window - slice, TimePoint{});
  EXPECT_TRUE(lan_only.has_room(slice, slice, target));
  EXPECT_FALSE(lan_only.has_room(2 * slice, slice, target));
  EXPECT_TRUE(with_path.has_room(path_window - lan_window, slice, target));
  EXPECT_FALSE(with_path.has_room(path_window - lan_window + 2 * slice, slice, target));
  // Deadlines before a measurement: never under the first one, and longer where the round trip
  // and what is in flight need it.
  EXPECT_EQ(lan_only.deadline(slice, 3.0, std::chrono::milliseconds(30), std::chrono::milliseconds(500)).count(), 500);
  EXPECT_GE(with_path.deadline(slice, 3.0, std::chrono::milliseconds(30), std::chrono::milliseconds(500)).count(), 500);
  EXPECT_EQ(with_path.deadline(slice, 3.0, std::chrono::milliseconds(30), std::chrono::milliseconds(50)).count(),
            static_cast<int64_t>(1000 * (3.0 * lan_window / path + 0.030 + round_trip)))
      << "what is in flight at the path's rate, and its round trip";

  // Both fill the path, the first copy comes back a round trip later, and the rest at the
  // path's rate, one slice at a time.
  RailEstimator cold;
  cold.assume(nic);
  RailEstimator hinted;
  hinted.assume(nic);
  hinted.assume_path(path, round_trip);
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
  };
  for (RailEstimator* e : {&cold, &hinted}) {
    for (int i = 0; i < 64; ++i) e->on_post(slice, TimePoint{});
    TimePoint t = TimePoint{} + seconds(round_trip);
    e->on_done(slice, true, t, t, TimePoint{});
    if (e == &cold) {
      // The round trip is a whole sample window of busy time: one slice over it.
      EXPECT_NEAR(cold.bandwidth(), slice / round_trip, 0.01 * slice / round_trip);
    } else {
      EXPECT_EQ(hinted.bandwidth(), 0) << "its sample starts here";
    }
    for (uint32_t i = 0; i < RailEstimator::kFirstSampleSlices; ++i) {
      t += seconds(slice / path);
      e->on_done(slice, true, t, t, TimePoint{});
    }
  }
  EXPECT_NEAR(hinted.bandwidth(), path, 0.01 * path) << "the path's rate";
  EXPECT_NEAR(hinted.round_trip(), round_trip, 1e-6) << "measured now";
  EXPECT_LT(cold.bandwidth(), 0.5 * path) << "the slice over the round trip, blended with the next sample";
}

// A cold TCP connection across a 40 ms WAN (a new one after a reset, or one idle between two
// versions) sends ten segments in its first round trip and doubles from there: a 128 KiB slice
// takes four round trips. Its deadline must allow them, or the copy expires, the rail is reset,
// the next copy starts cold again, and the rail never carries anything (a relay's child across
// the WAN in the namespace test of sites starved, and the round stalled).
TEST(RailEstimator, ADeadlineWaitsForAColdConnectionsSlowStart) {
  EXPECT_EQ(RailEstimator::slow_start_round_trips(128 << 10, 0), 0u) << "no slow start";
  EXPECT_EQ(RailEstimator::slow_start_round_trips(14480, 14480), 0u) << "one window: the first round trip";
  EXPECT_EQ(RailEstimator::slow_start_round_trips(14481, 14480), 1u);
  // 14480, then 28960, 57920, 115840: 217,200 bytes by the end of the fourth round trip.
  EXPECT_EQ(RailEstimator::slow_start_round_trips(128 << 10, 14480), 3u);
  EXPECT_EQ(RailEstimator::slow_start_round_trips(217200, 14480), 3u);
  EXPECT_EQ(RailEstimator::slow_start_round_trips(217201, 14480), 4u);

  const uint32_t slice = 128 << 10;
  const double rate = 12.5e6;  // 100 Mbit/s
  const double round_trip = 0.040 + slice / rate;
  // Measured at the link's rate (a warm window), and one copy alone on the link for the round trip.
  RailEstimator wan;
  TimePoint t = deliver(wan, TimePoint{}, RailEstimator::kFirstSampleSlices, slice, rate);
  wan.on_post(slice, t);
  const TimePoint alone = t;
  t += std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(round_trip));
  wan.on_done(slice, true, t, t, alone);
  ASSERT_GT(wan.bandwidth(), 0.5 * rate);
  ASSERT_NEAR(wan.base_delay(), round_trip, 1e-6);
  const auto min_margin = std::chrono::milliseconds(30), first = std::chrono::milliseconds(500);
  const auto warm = wan.deadline(slice, 3.0, min_margin, first, 0);
  const auto cold = wan.deadline(slice, 3.0, min_margin, first, 14480);
  // What the slice takes on a cold connection: four round trips of propagation, then its bytes.
  const double needs = 4 * 0.040 + slice / rate;
  EXPECT_LT(std::chrono::duration<double>(warm).count(), needs) << "the deadline this rule is for";
  EXPECT_GE(std::chrono::duration<double>(cold).count(), needs);
  EXPECT_NEAR(std::chrono::duration<double>(cold - warm).count(), 3 * round_trip, 0.002) << "three round trips more";

  // On a LAN with small slices the round trip is short: the same rule adds little.
  RailEstimator lan;
  t = TimePoint{};
  for (uint32_t i = 0; i < RailEstimator::kFirstSampleSlices; ++i) {
    lan.on_post(slice, t);
    const TimePoint posted = t;
    t += std::chrono::microseconds(1100);
    lan.on_done(slice, true, t, t, posted);
  }
  EXPECT_LE(lan.deadline(slice, 3.0, min_margin, first, 14480) - lan.deadline(slice, 3.0, min_margin, first, 0),
            std::chrono::milliseconds(4));
}

// A link's rate counts every live rail: those too little used in a transfer to be measured at
// their measured siblings' median (the same NICs), not at nothing.
TEST(RailEstimator, ALinksRateCountsItsUnmeasuredLiveRailsAtTheirSiblingsMedian) {
  EXPECT_DOUBLE_EQ(link_rail_rate({50e9, 40e9, 60e9}, 3), 150e9);
  // Three of eight rails measured: the other five at the median, 50 GB/s.
  EXPECT_DOUBLE_EQ(link_rail_rate({50e9, 40e9, 60e9}, 8), 150e9 + 5 * 50e9);
  // A slow rail that was measured counts at its own rate.
  EXPECT_DOUBLE_EQ(link_rail_rate({50e9, 5e9, 50e9, 50e9}, 4), 155e9);
  EXPECT_EQ(link_rail_rate({}, 8), 0) << "nothing measured says nothing";
  EXPECT_DOUBLE_EQ(link_rail_rate({50e9, 40e9}, 1), 90e9) << "never fewer than the rails measured";
}

}  // namespace
}  // namespace deltacast
