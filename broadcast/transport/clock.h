// The transport's notion of time: the steady clock, and durations as seconds.
// Pieces that keep time-based state (rail health, the rail estimator, the
// slice table) take the time as an argument, so tests drive them with times
// of their own.
#pragma once

#include <chrono>

namespace deltacast {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

inline double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace deltacast
