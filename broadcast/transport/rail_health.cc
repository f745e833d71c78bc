#include "broadcast/transport/rail_health.h"

#include <algorithm>

namespace deltacast {

std::string_view rail_state_name(RailState state) {
  switch (state) {
    case RailState::kHealthy: return "healthy";
    case RailState::kSuspect: return "suspect";
    case RailState::kPaused: return "paused";
    case RailState::kProbing: return "probing";
  }
  return "unknown";
}

RailState RailHealth::state(TimePoint now) {
  if (state_ == RailState::kPaused && now >= paused_until_) state_ = RailState::kProbing;
  return state_;
}

void RailHealth::pause(TimePoint now) {
  state_ = RailState::kPaused;
  paused_until_ = now + backoff_;
}

void RailHealth::on_success(TimePoint now) {
  state(now);
  // A success while paused (a slice sent before the pause got through after all) counts like a
  // probe that succeeded: the rail carries data.
  if (state_ == RailState::kProbing || state_ == RailState::kPaused) backoff_ = options_.initial_backoff;
  state_ = RailState::kHealthy;
}

void RailHealth::on_failure(TimePoint now) {
  state(now);
  failures_.push_back(now);
  while (!failures_.empty() && now - failures_.front() > options_.error_window) failures_.pop_front();
  switch (state_) {
    case RailState::kHealthy:
      if (static_cast<int>(failures_.size()) >= options_.failures_to_pause) {
        pause(now);
      } else {
        state_ = RailState::kSuspect;
      }
      break;
    case RailState::kSuspect:
      pause(now);
      break;
    case RailState::kProbing:
      backoff_ = std::min(backoff_ * 2, options_.max_backoff);
      pause(now);
      break;
    case RailState::kPaused:
      break;  // late failures of slices sent before the pause change nothing
  }
}

}  // namespace deltacast
