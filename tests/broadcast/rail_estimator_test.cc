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

}  // namespace
}  // namespace deltacast
