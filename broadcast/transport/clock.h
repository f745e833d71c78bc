// The transport's notion of time: the steady clock, and durations as seconds.
// Pieces that keep time-based state (rail health, the rail estimator, the
// slice table) take the time as an argument, so tests drive them with times
// of their own; the sprayer reads it from a TimeSource.
#pragma once

#include <chrono>

namespace deltacast {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

inline double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// Where a sprayer takes the time from: the steady clock, or a simulation's clock
// (transport/sim), whose time moves only as its events are run.
class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual TimePoint now() const = 0;
};

}  // namespace deltacast
