#include "wire/wire_metrics.h"

#include <gtest/gtest.h>

namespace deltacast::bench {
namespace {

using std::chrono::milliseconds;

TEST(WireMetrics, PrefixStallIsTheLongestWaitForTheInOrderPrefix) {
  const TimePoint t0{};
  // Slice 1 arrives late (at 100 ms) while slices 2..3 came early: the prefix waits from 10 to 100.
  const std::vector<TimePoint> arrival = {t0 + milliseconds(10), t0 + milliseconds(100), t0 + milliseconds(12),
                                          t0 + milliseconds(14), t0 + milliseconds(110)};
  EXPECT_DOUBLE_EQ(max_prefix_stall_ms(arrival, t0), 90.0);
  EXPECT_DOUBLE_EQ(max_arrival_gap_ms(arrival, t0), 86.0);  // 14 -> 100
}

TEST(WireMetrics, RailEvents) {
  const TimePoint t0{};
  const std::vector<SprayEvent> events = {
      {SprayEvent::kSent, 0, 0, 100, false, t0},
      {SprayEvent::kSent, 1, 1, 300, false, t0 + milliseconds(5)},
      {SprayEvent::kAcked, 0, 0, 100, false, t0 + milliseconds(20)},
      {SprayEvent::kAcked, 1, 1, 300, false, t0 + milliseconds(30)},
  };
  EXPECT_DOUBLE_EQ(*first_ack_after_ms(events, 1, t0 + milliseconds(10)), 20.0);
  EXPECT_FALSE(first_ack_after_ms(events, 0, t0 + milliseconds(25)).has_value());
  EXPECT_DOUBLE_EQ(send_share(events, 1, t0, t0 + milliseconds(40)), 0.75);
}

TEST(WireMetrics, RailTimelineBinsAcknowledgedBytesAsRates) {
  const TimePoint t0{};
  const std::vector<SprayEvent> events = {
      {SprayEvent::kSent, 0, 0, 1'000'000, false, t0},                             // not acknowledged: not counted
      {SprayEvent::kAcked, 0, 0, 1'000'000, false, t0 + milliseconds(3)},           // bin 0
      {SprayEvent::kAcked, 1, 1, 2'000'000, false, t0 + milliseconds(15)},          // bin 1
      {SprayEvent::kAcked, 0, 2, 1'000'000, false, t0 + milliseconds(19)},          // bin 1
      {SprayEvent::kAcked, 0, 3, 1'000'000, false, t0 + milliseconds(25)},          // past the end
  };
  const auto gbps = rail_timeline(events, 2, t0, t0 + milliseconds(20), milliseconds(10));
  ASSERT_EQ(gbps.size(), 2u);
  ASSERT_EQ(gbps[0].size(), 2u);
  EXPECT_DOUBLE_EQ(gbps[0][0], 0.8);  // 1 MB in 10 ms
  EXPECT_DOUBLE_EQ(gbps[0][1], 0.8);
  EXPECT_DOUBLE_EQ(gbps[1][0], 0.0);
  EXPECT_DOUBLE_EQ(gbps[1][1], 1.6);
  EXPECT_TRUE(rail_timeline(events, 2, t0, t0, milliseconds(10))[0].empty());
}

}  // namespace
}  // namespace deltacast::bench
