#include "broadcast/control_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include "broadcast/tcp/wire.h"

namespace deltacast {

ControlLink::ControlLink(int fd, ControlLinkOptions options, OnMessage on_message, OnClose on_close)
    : fd_(fd),
      options_(options),
      on_message_(std::move(on_message)),
      on_close_(std::move(on_close)),
      peer_(tcp::peer_name(fd)) {
  tcp::tune_socket(fd_, tcp::SocketOptions{});
  reader_ = std::thread([this] { read_loop(); });
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

ControlLink::~ControlLink() {
  close();
  if (reader_.joinable()) reader_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  ::close(fd_);
}

Status ControlLink::send(const Json& message) {
  if (closed_) return unavailable("control link to {} is closed", peer_);
  std::lock_guard<std::mutex> lock(write_mu_);
  Status s = write_message(fd_, message, ControlClock::now() + options_.write_timeout, &closed_);
  if (!s.ok()) {
    shutdown(fd_, SHUT_RDWR);  // the reader reports the loss
  }
  return s;
}

void ControlLink::close(const Status& why) {
  if (closed_.exchange(true)) return;
  shutdown(fd_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(close_mu_);
    close_cv_.notify_all();
  }
  (void)why;
}

void ControlLink::finish(const Status& why) {
  closed_ = true;
  shutdown(fd_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(close_mu_);
    close_cv_.notify_all();
  }
  if (!finished_.exchange(true) && on_close_) on_close_(why);
}

void ControlLink::read_loop() {
  for (;;) {
    auto message = read_message(fd_, ControlClock::now() + options_.dead_after, options_.frame_timeout, &closed_);
    if (!message.ok()) {
      const Status why = message.status().code() == StatusCode::kDeadlineExceeded
                             ? unavailable("{} went silent for {} ms", peer_, options_.dead_after.count())
                             : message.status();
      finish(closed_ ? cancelled("control link closed") : why);
      return;
    }
    if ((*message)["type"] == msg::kHeartbeat) continue;
    if (on_message_) on_message_(*message);
  }
}

void ControlLink::heartbeat_loop() {
  const Json beat = {{"type", msg::kHeartbeat}};
  std::unique_lock<std::mutex> lock(close_mu_);
  while (!closed_) {
    close_cv_.wait_for(lock, options_.heartbeat, [&] { return closed_.load(); });
    if (closed_) return;
    lock.unlock();
    (void)send(beat);
    lock.lock();
  }
}

}  // namespace deltacast
