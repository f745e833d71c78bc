// Asynchronous device and port events, turned into what a rail must do: a port
// that went down pauses every rail on it at once (without waiting for a slice
// to time out), a port that came back lets them reconnect, a fatal device
// error stops every rail on the device.
//
// EventRouter is the pure part (who is told what), tested without a device;
// watch_device() starts one thread per device that reads the device's events
// from a context of its own (so that no other user of the device's context
// can consume them first) and routes them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/status.h"

namespace deltacast::verbs {

enum class PortSignal { kNone, kPortDown, kPortUp, kDeviceFatal };
std::string_view port_signal_name(PortSignal signal);

// What an ibv_event_type (its integer value) means for rails; kNone for the
// events that concern one queue pair or completion queue (their owner sees
// those as failed work completions) or nothing at all.
PortSignal classify_event(int event_type);

class EventRouter {
 public:
  using Handler = std::function<void(PortSignal)>;

  // `handler` runs on the watcher thread for every signal on (device, port);
  // returns an id for unsubscribe().
  int subscribe(const std::string& device, uint8_t port, Handler handler);
  // After it returns, the handler is not running and never runs again.
  void unsubscribe(int id);
  // A signal for one port (kDeviceFatal: for every port of the device).
  void route(const std::string& device, uint8_t port, PortSignal signal);
  size_t subscribers() const;

 private:
  struct Subscription {
    std::string device;
    uint8_t port;
    Handler handler;
  };
  mutable std::mutex mu_;  // held while handlers run: unsubscribe() waits for a running one
  std::map<int, Subscription> subscriptions_;
  int next_id_ = 1;
};

// The process's router, fed by the device watchers.
EventRouter& device_events();
// Starts (once per device name) the thread that feeds device_events() from `device`.
Status watch_device(const std::string& device);

}  // namespace deltacast::verbs
