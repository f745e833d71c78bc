#include "broadcast/transport/rail_health.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

using std::chrono::milliseconds;

TEST(RailHealth, FailureMakesSuspectAndSuccessHeals) {
  RailHealth h;
  const TimePoint t0{};
  EXPECT_EQ(h.state(t0), RailState::kHealthy);
  h.on_failure(t0);
  EXPECT_EQ(h.state(t0), RailState::kSuspect);
  h.on_success(t0 + milliseconds(1));
  EXPECT_EQ(h.state(t0 + milliseconds(1)), RailState::kHealthy);
}

TEST(RailHealth, RepeatedFailuresPauseWithExponentialBackoffThenProbe) {
  RailHealthOptions options;
  options.initial_backoff = milliseconds(50);
  options.max_backoff = milliseconds(400);
  RailHealth h(options);
  TimePoint now{};
  h.on_failure(now);
  h.on_failure(now + milliseconds(1));
  EXPECT_EQ(h.state(now + milliseconds(1)), RailState::kPaused);
  EXPECT_EQ(h.state(now + milliseconds(40)), RailState::kPaused);
  now += milliseconds(52);
  EXPECT_EQ(h.state(now), RailState::kProbing);
  // Each failed probe doubles the pause, up to the cap.
  for (int expected : {100, 200, 400, 400}) {
    h.on_failure(now);
    EXPECT_EQ(h.state(now), RailState::kPaused);
    EXPECT_EQ(h.backoff(), milliseconds(expected));
    EXPECT_EQ(h.state(now + milliseconds(expected - 1)), RailState::kPaused);
    now += milliseconds(expected);
    EXPECT_EQ(h.state(now), RailState::kProbing);
  }
  // A successful probe heals the rail and resets the backoff.
  h.on_success(now);
  EXPECT_EQ(h.state(now), RailState::kHealthy);
  EXPECT_EQ(h.backoff(), milliseconds(50));
}

TEST(RailHealth, FailuresOutsideTheWindowDoNotAccumulate) {
  RailHealthOptions options;
  options.error_window = milliseconds(100);
  RailHealth h(options);
  TimePoint now{};
  h.on_failure(now);
  h.on_success(now + milliseconds(10));
  h.on_failure(now + milliseconds(500));  // the first failure has left the window
  EXPECT_EQ(h.state(now + milliseconds(500)), RailState::kSuspect);
}

TEST(RailHealth, LateFailuresWhilePausedChangeNothing) {
  RailHealth h;
  TimePoint now{};
  h.on_failure(now);
  h.on_failure(now);
  const TimePoint until = h.paused_until();
  h.on_failure(now + milliseconds(5));
  EXPECT_EQ(h.paused_until(), until);
}

}  // namespace
}  // namespace deltacast
