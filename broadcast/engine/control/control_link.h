// One control connection (coordinator <-> consumer): a reader thread decodes
// every message and hands it to a callback, send() may be called from any
// thread, and heartbeats flow both ways so that a peer that vanished without
// closing (a pulled cable, a frozen host) is noticed within `dead_after`. A
// message that breaks the protocol (control_messages.h) closes the link with
// the reason.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/engine/control/control_messages.h"
#include "broadcast/transport/handshake.h"

namespace deltacast {

struct ControlLinkOptions {
  std::chrono::milliseconds heartbeat{100};
  std::chrono::milliseconds dead_after{1500};
  std::chrono::milliseconds frame_timeout{10000};
  std::chrono::milliseconds write_timeout{5000};
};

class ControlLink {
 public:
  using OnMessage = std::function<void(const control::Message&)>;
  using OnClose = std::function<void(const Status&)>;

  // Takes ownership of a connected socket whose handshake made `session` (every frame is sealed
  // with it) and starts its threads. The callbacks run on the link's reader thread; on_close must
  // not destroy the link (owners reap closed links later).
  ControlLink(int fd, net::Session session, ControlLinkOptions options, OnMessage on_message, OnClose on_close);
  ~ControlLink();
  ControlLink(const ControlLink&) = delete;
  ControlLink& operator=(const ControlLink&) = delete;

  Status send(const control::Message& message);
  // Closes the connection; on_close runs once (from the link's thread) unless already run.
  void close(const Status& why = Status());
  bool open() const { return !closed_; }
  const std::string& peer() const { return peer_; }

 private:
  void read_loop();
  void heartbeat_loop();
  void finish(const Status& why);

  int fd_;
  net::Session session_;  // outgoing: under write_mu_; incoming: the reader thread's
  ControlLinkOptions options_;
  OnMessage on_message_;
  OnClose on_close_;
  std::string peer_;
  std::mutex write_mu_;
  std::mutex close_mu_;
  std::condition_variable close_cv_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> finished_{false};
  std::thread reader_;
  std::thread heartbeat_;
};

}  // namespace deltacast
