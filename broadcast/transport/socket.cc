#include "broadcast/transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace deltacast::net {

namespace {

// Waits until fd is ready for `events`, checking `stop` every 20 ms.
Status wait_ready(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* stop, const char* what) {
  for (;;) {
    if (stop != nullptr && stop->load()) return cancelled("{}: closing", what);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return deadline_exceeded("{} timed out", what);
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 20)));
    if (n > 0) {
      if (p.revents & (POLLERR | POLLNVAL)) return io_error("{}: socket error", what);
      return Status();
    }
    if (n < 0 && errno != EINTR) return io_error("{}: poll: {}", what, std::strerror(errno));
  }
}

}  // namespace

Status read_full(int fd, void* buffer, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop) {
  auto* p = static_cast<uint8_t*>(buffer);
  while (n > 0) {
    const ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return unavailable("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error("recv: {}", std::strerror(errno));
    DC_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline, stop, "read"));
  }
  return Status();
}

Status write_full(int fd, const void* a, size_t a_len, const void* b, size_t b_len, Clock::time_point deadline,
                  const std::atomic<bool>* stop) {
  iovec iov[2] = {{const_cast<void*>(a), a_len}, {const_cast<void*>(b), b_len}};
  int count = b_len > 0 ? 2 : 1;
  iovec* v = iov;
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = v;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t sent = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return io_error("send: {}", std::strerror(errno));
      DC_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, deadline, stop, "write"));
      continue;
    }
    size_t left = static_cast<size_t>(sent);
    while (count > 0 && left >= v->iov_len) {
      left -= v->iov_len;
      ++v;
      --count;
    }
    if (count > 0) {
      v->iov_base = static_cast<uint8_t*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  return Status();
}

namespace {

// Switches this thread into another network namespace and back on destruction.
class NetnsSwitch {
 public:
  explicit NetnsSwitch(const std::string& netns) {
    if (netns.empty()) return;
    home_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const std::string path = "/var/run/netns/" + netns;
    const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (home_ < 0 || target < 0) {
      status_ = io_error("network namespace '{}': {}", netns, std::strerror(errno));
    } else if (setns(target, CLONE_NEWNET) != 0) {
      status_ = io_error("entering network namespace '{}': {}", netns, std::strerror(errno));
    }
    if (target >= 0) ::close(target);
  }
  ~NetnsSwitch() {
    if (home_ >= 0) {
      setns(home_, CLONE_NEWNET);
      ::close(home_);
    }
  }
  const Status& status() const { return status_; }

 private:
  int home_ = -1;
  Status status_;
};

}  // namespace

Status enter_netns(const std::string& netns) {
  if (netns.empty()) return Status();
  const std::string path = "/var/run/netns/" + netns;
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) return io_error("network namespace '{}': {}", netns, std::strerror(errno));
  const int rc = setns(target, CLONE_NEWNET);
  ::close(target);
  if (rc != 0) return io_error("entering network namespace '{}': {}", netns, std::strerror(errno));
  return Status();
}

Result<int> open_socket(const std::string& netns) {
  NetnsSwitch in(netns);
  DC_RETURN_IF_ERROR(in.status());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket: {}", std::strerror(errno));
  return fd;
}

Result<std::pair<int, Endpoint>> listen_socket(const std::string& netns, const Endpoint& endpoint, int backlog) {
  DC_ASSIGN_OR_RETURN(int fd, open_socket(netns));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(endpoint.port);
  if (inet_pton(AF_INET, endpoint.host.c_str(), &a.sin_addr) != 1) {
    ::close(fd);
    return invalid_argument("'{}' is not an IPv4 address", endpoint.host);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    ::close(fd);
    return unavailable("cannot listen on {}: {}", endpoint.to_string(), std::strerror(err));
  }
  if (listen(fd, backlog) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("listen on {}: {}", endpoint.to_string(), std::strerror(err));
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::pair{fd, Endpoint{endpoint.host, ntohs(a.sin_port)}};
}

void tune_socket(int fd, const SocketOptions& options) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int idle = 1, interval = 1, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  if (options.user_timeout.count() > 0) {
    const unsigned ms = static_cast<unsigned>(options.user_timeout.count());
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
  }
  if (options.send_buffer > 0) {
    const int bytes = static_cast<int>(options.send_buffer);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
}

namespace {

sockaddr_in to_sockaddr(const Endpoint& e) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(e.port);
  inet_pton(AF_INET, e.host.c_str(), &a.sin_addr);
  return a;
}

}  // namespace

Status connect_socket(int fd, const Endpoint& local, const Endpoint& remote, std::chrono::milliseconds timeout) {
  const sockaddr_in from = to_sockaddr(Endpoint{local.host, 0});
  if (bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0) {
    return io_error("bind {}: {}", local.host, std::strerror(errno));
  }
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  const sockaddr_in to = to_sockaddr(remote);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS) {
    return unavailable("connect {} -> {}: {}", local.host, remote.to_string(), std::strerror(errno));
  }
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
    return unavailable("connect {} -> {}: no answer within {} ms", local.host, remote.to_string(), timeout.count());
  }
  int error = 0;
  socklen_t len = sizeof(error);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) return unavailable("connect {} -> {}: {}", local.host, remote.to_string(), std::strerror(error));
  return Status();
}

std::string peer_name(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
  return fmt::format("{}:{}", text, ntohs(a.sin_port));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace deltacast::net
