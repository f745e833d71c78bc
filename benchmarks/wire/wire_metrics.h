// Figures computed from a transfer's slice arrival times and the sprayer's
// events: how long the receiver went without its in-order prefix growing
// (the self-healing time when a rail fails), how soon a restored rail carries
// data again, how a throttled rail's share of the slices moves, and each rail's rate over time.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "broadcast/transport/rail_health.h"
#include "broadcast/transport/sprayer.h"

namespace deltacast::bench {

// Longest time (ms) during which the contiguous prefix of arrived slices did
// not grow, from `start` until the last slice arrived.
double max_prefix_stall_ms(const std::vector<TimePoint>& arrival, TimePoint start);
// Longest time (ms) between any two consecutive slice arrivals.
double max_arrival_gap_ms(std::vector<TimePoint> arrival, TimePoint start);

// Milliseconds from `from` to the first acknowledgement on `rail`, if any.
std::optional<double> first_ack_after_ms(const std::vector<SprayEvent>& events, uint32_t rail, TimePoint from);

// Share of the bytes sent in [from, until) that went to `rail` (first copies and re-sends alike).
double send_share(const std::vector<SprayEvent>& events, uint32_t rail, TimePoint from, TimePoint until);

// Each rail's acknowledged bytes per `bin` from `start` to `end`, as Gbit/s: gbps[rail][bin].
std::vector<std::vector<double>> rail_timeline(const std::vector<SprayEvent>& events, size_t rails, TimePoint start,
                                               TimePoint end, SteadyClock::duration bin);

}  // namespace deltacast::bench
