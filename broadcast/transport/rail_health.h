// Health of one rail as a small state machine, driven by the outcomes of the
// slices it carries. Time is passed in, so tests drive it with a fake clock.
//
//   healthy --failure--> suspect --failure--> paused --backoff over--> probing
//      ^                    |                   ^                        |
//      +------success-------+                   +------failure-----------+ (backoff doubles)
//      +------------------------------success----------------------------+ (backoff resets)
//
// Enough failures inside the window pause a healthy rail at once. A paused
// rail takes no slices; a probing rail carries one probe at a time.
#pragma once

#include <chrono>
#include <deque>
#include <string_view>

#include "broadcast/transport/clock.h"

namespace deltacast {

enum class RailState { kHealthy, kSuspect, kPaused, kProbing };
std::string_view rail_state_name(RailState state);

struct RailHealthOptions {
  std::chrono::milliseconds error_window{1000};
  int failures_to_pause = 2;  // failures inside the window that pause a rail
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{1000};
};

class RailHealth {
 public:
  explicit RailHealth(RailHealthOptions options = {}) : options_(options), backoff_(options.initial_backoff) {}

  // The state at `now`: a paused rail whose backoff is over becomes probing.
  RailState state(TimePoint now);
  void on_success(TimePoint now);
  void on_failure(TimePoint now);
  std::chrono::milliseconds backoff() const { return backoff_; }
  TimePoint paused_until() const { return paused_until_; }

 private:
  void pause(TimePoint now);

  RailHealthOptions options_;
  RailState state_ = RailState::kHealthy;
  std::deque<TimePoint> failures_;
  std::chrono::milliseconds backoff_;
  TimePoint paused_until_{};
};

}  // namespace deltacast
