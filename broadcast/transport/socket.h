// TCP socket helpers shared by the control plane and the TCP data backend:
// sockets opened inside a network namespace, listening and connecting with
// timeouts, and reads and writes that never block without a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "broadcast/transport/rail.h"
#include "core/status.h"

namespace deltacast::net {

using Clock = std::chrono::steady_clock;

// Reads exactly n bytes before `deadline`; gives up early when *stop turns true.
Status read_full(int fd, void* buffer, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);
// Writes exactly the two buffers' bytes (b may be empty) before `deadline`.
Status write_full(int fd, const void* a, size_t a_len, const void* b, size_t b_len, Clock::time_point deadline,
                  const std::atomic<bool>* stop = nullptr);

struct SocketOptions {
  std::chrono::milliseconds user_timeout{0};  // TCP_USER_TIMEOUT, 0 leaves the default
  uint32_t send_buffer = 0;                   // SO_SNDBUF, 0 leaves the default
};

// A TCP socket created in network namespace `netns` (empty: this thread's own).
Result<int> open_socket(const std::string& netns);
void tune_socket(int fd, const SocketOptions& options);
// A socket bound to `endpoint` (port 0: any free one) and listening; returns
// it with the address actually bound.
Result<std::pair<int, Endpoint>> listen_socket(const std::string& netns, const Endpoint& endpoint, int backlog = 64);
// Connects `fd` from `local` to `remote` within `timeout`.
Status connect_socket(int fd, const Endpoint& local, const Endpoint& remote, std::chrono::milliseconds timeout);
std::string peer_name(int fd);
// This machine's host name ("localhost" if it has none).
std::string host_name();

// Moves the calling thread into a network namespace for good (the threads of
// a channel or listener that works inside one).
Status enter_netns(const std::string& netns);

}  // namespace deltacast::net
