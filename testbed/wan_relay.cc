#include "testbed/wan_relay.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace deltacast {

namespace {

// A tap in the calling thread's network namespace; frames without the packet-info header.
Result<int> open_tap(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open /dev/net/tun: {}", std::strerror(errno));
  ifreq request{};
  request.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &request) < 0) {
    const int error = errno;
    close(fd);
    return io_error("cannot create tap '{}': {}", name, std::strerror(error));
  }
  return fd;
}

// Runs `make` with the calling thread inside network namespace `netns`, then returns it to its own.
template <typename Make>
Status in_netns(const std::string& netns, Make make) {
  const int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (own < 0) return io_error("cannot open this thread's network namespace: {}", std::strerror(errno));
  const int target = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0 || setns(target, CLONE_NEWNET) != 0) {
    const int error = errno;
    if (target >= 0) close(target);
    close(own);
    return io_error("cannot enter network namespace '{}': {}", netns, std::strerror(error));
  }
  Status made = make();
  const bool back = setns(own, CLONE_NEWNET) == 0;
  close(target);
  close(own);
  // Left in the switch's namespace, every later command of this process would run there.
  if (!back) std::abort();
  return made;
}

long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Held {
  long due_ns;
  std::vector<char> frame;
};

}  // namespace

Result<std::unique_ptr<WanRelay>> WanRelay::start(const std::string& netns, const std::string& a_name,
                                                  const std::string& b_name, double delay_ms) {
  std::unique_ptr<WanRelay> relay(new WanRelay());
  relay->delay_ns_ = static_cast<long>(delay_ms * 1e6);
  DC_RETURN_IF_ERROR(in_netns(netns, [&]() -> Status {
    for (int side = 0; side < 2; ++side) {
      auto fd = open_tap(side == 0 ? a_name : b_name);
      if (!fd.ok()) return fd.status();
      relay->fds_[side] = *fd;
    }
    return Status();
  }));
  if (pipe2(relay->wake_, O_CLOEXEC) != 0) return io_error("pipe: {}", std::strerror(errno));
  relay->thread_ = std::thread([r = relay.get()] { r->run(); });
  return relay;
}

WanRelay::~WanRelay() {
  if (thread_.joinable()) {
    (void)!write(wake_[1], "x", 1);
    thread_.join();
  }
  for (int fd : {fds_[0], fds_[1], wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void WanRelay::run() {
  // held[d]: frames read from side d, waiting to be written to the other side.
  std::deque<Held> held[2];
  std::vector<char> buffer(65536);
  for (;;) {
    int timeout_ms = -1;
    for (const auto& queue : held) {
      if (queue.empty()) continue;
      const long wait_ms = (queue.front().due_ns - now_ns() + 999'999) / 1'000'000;
      timeout_ms = timeout_ms < 0 ? static_cast<int>(std::max(0L, wait_ms))
                                  : std::min(timeout_ms, static_cast<int>(std::max(0L, wait_ms)));
    }
    pollfd polled[3] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(polled, 3, timeout_ms) < 0 && errno != EINTR) return;
    if (polled[2].revents != 0) return;
    // A tap gone (its namespace deleted first): stop rather than spin on its error.
    if (((polled[0].revents | polled[1].revents) & (POLLERR | POLLHUP | POLLNVAL)) != 0) return;
    const bool carrying = up_.load();
    for (int side = 0; side < 2; ++side) {
      if ((polled[side].revents & POLLIN) == 0) continue;
      // Drain what is there: a burst of frames shares one wake-up.
      for (;;) {
        const ssize_t n = read(fds_[side], buffer.data(), buffer.size());
        if (n <= 0) break;
        if (carrying) held[side].push_back(Held{now_ns() + delay_ns_, std::vector<char>(buffer.data(), buffer.data() + n)});
      }
    }
    const long now = now_ns();
    for (int side = 0; side < 2; ++side) {
      if (!carrying) held[side].clear();  // a cut loses what was on the fibre too
      while (!held[side].empty() && held[side].front().due_ns <= now) {
        const auto& frame = held[side].front().frame;
        (void)!write(fds_[1 - side], frame.data(), frame.size());
        held[side].pop_front();
      }
    }
  }
}

}  // namespace deltacast
