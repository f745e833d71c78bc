#include "broadcast/engine/control/control_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include "broadcast/transport/socket.h"
#include "core/log.h"

namespace deltacast {

ControlLink::ControlLink(int fd, net::Session session, ControlLinkOptions options, OnMessage on_message,
                         OnClose on_close)
    : fd_(fd),
      session_(std::move(session)),
      options_(options),
      on_message_(std::move(on_message)),
      on_close_(std::move(on_close)),
      peer_(net::peer_name(fd)) {
  net::tune_socket(fd_, net::SocketOptions{});
  reader_ = std::thread([this] { read_loop(); });
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

ControlLink::~ControlLink() {
  close();
  if (reader_.joinable()) reader_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  ::close(fd_);
}

Status ControlLink::send(const control::Message& message) {
  if (closed_) return unavailable("control link to {} is closed", peer_);
  const std::string text = control::encode_text(message);
  std::lock_guard<std::mutex> lock(write_mu_);
  Status s = write_control_frame(fd_, text, *session_.seals.outgoing, ControlClock::now() + options_.write_timeout,
                                 &closed_);
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
    auto text = read_control_frame(fd_, *session_.seals.incoming, ControlClock::now() + options_.dead_after,
                                   options_.frame_timeout, &closed_);
    auto message = text.ok() ? control::decode_text(*text) : Result<control::Message>(text.status());
    if (!message.ok()) {
      const Status why = message.status().code() == StatusCode::kDeadlineExceeded
                             ? unavailable("{} went silent for {} ms", peer_, options_.dead_after.count())
                             : message.status();
      finish(closed_ ? cancelled("control link closed") : why);
      return;
    }
    if (std::holds_alternative<control::Heartbeat>(*message)) continue;
    if (on_message_) on_message_(*message);
  }
}

void ControlLink::heartbeat_loop() {
  const control::Message beat = control::Heartbeat{};
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
