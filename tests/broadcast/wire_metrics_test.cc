#include "wire_metrics.h"

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

}  // namespace
}  // namespace deltacast::bench
