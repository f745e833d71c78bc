#include "cli/bench_util.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace deltacast::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double memcpy_gbps(std::span<const TensorView> tensors, uint8_t* scratch, int reps) {
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    times.push_back(time_seconds([&] {
      uint8_t* out = scratch;
      for (const auto& t : tensors) {
        std::memcpy(out, t.data, t.nbytes());
        out += t.nbytes();
      }
    }));
  }
  return gbps(static_cast<double>(total), median(times));
}

Progress::Progress(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() { finish(); }

void Progress::update(std::string_view message) {
  if (!enabled_) return;
  if (tty_) {
    const size_t pad = last_width_ > message.size() ? last_width_ - message.size() : 0;
    fmt::print(stderr, "\r{}{}", message, std::string(pad, ' '));
    last_width_ = message.size();
  } else {
    fmt::print(stderr, "{}\n", message);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_ && last_width_ > 0) {
    fmt::print(stderr, "\r{}\r", std::string(last_width_, ' '));
    last_width_ = 0;
  }
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.2f} {}", bytes, units[u]);
}

int command_failed(std::string_view command, const Status& status) {
  fmt::print(stderr, "deltacast-bench {}: {}\n", command, status.to_string());
  return 1;
}

}  // namespace deltacast::bench
