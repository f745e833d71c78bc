// A WAN link between two sites of a testbed: two tap devices, each a port of
// one site's bridge, and a thread that carries every frame read from one to
// the other after a fixed delay. This kernel has no netem, so the delay lives
// here; rates are shaped by tbf on the taps (frames leave a bridge through its
// tap's qdisc before the relay reads them). Cutting the link drops frames
// silently, in both directions, as a failed fibre would; the taps' counters
// (/proc/net/dev of the switch namespace) count what crossed.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace deltacast {

class WanRelay {
 public:
  // Creates taps `a_name` and `b_name` inside network namespace `netns` (a
  // name under /var/run/netns) and starts carrying frames between them.
  static Result<std::unique_ptr<WanRelay>> start(const std::string& netns, const std::string& a_name,
                                                 const std::string& b_name, double delay_ms);
  ~WanRelay();

  void set_up(bool up) { up_.store(up); }
  bool up() const { return up_.load(); }

 private:
  WanRelay() = default;
  void run();

  int fds_[2] = {-1, -1};
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends the thread
  long delay_ns_ = 0;
  std::atomic<bool> up_{true};
  std::thread thread_;
};

}  // namespace deltacast
