// Small pieces every deltacast-bench mode shares: timing with medians,
// a progress line for people watching a terminal, and the memcpy baseline
// that speeds are compared against in the same run.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor_view.h"

namespace deltacast::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <typename Fn>
double time_seconds(Fn&& fn) {
  const auto start = Clock::now();
  fn();
  return seconds_between(start, Clock::now());
}

double median(std::vector<double> values);

// Bytes per second in GB/s (10^9).
inline double gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

// Median GB/s of copying every tensor's bytes with one thread into `scratch`
// (which must hold the sum of their sizes), over `reps` runs.
double memcpy_gbps(std::span<const TensorView> tensors, uint8_t* scratch, int reps);

// One status line on stderr, rewritten in place on a terminal and printed
// line by line otherwise (CI logs), so long runs show they are alive.
class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  void update(std::string_view message);
  void finish();

 private:
  bool enabled_;
  bool tty_;
  size_t last_width_ = 0;
};

std::string human_bytes(double bytes);

// Prints "deltacast-bench <command>: <status>" to stderr and returns the exit code for it (1).
int command_failed(std::string_view command, const Status& status);

}  // namespace deltacast::bench
