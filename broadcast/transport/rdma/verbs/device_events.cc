#include "broadcast/transport/rdma/verbs/device_events.h"

#include <infiniband/verbs.h>
#include <fcntl.h>
#include <poll.h>

#include <cstring>

#include <memory>
#include <thread>
#include <vector>

#include "core/log.h"

namespace deltacast::verbs {

std::string_view port_signal_name(PortSignal signal) {
  switch (signal) {
    case PortSignal::kNone: return "none";
    case PortSignal::kPortDown: return "port down";
    case PortSignal::kPortUp: return "port up";
    case PortSignal::kDeviceFatal: return "device fatal";
  }
  return "?";
}

PortSignal classify_event(int event_type) {
  switch (static_cast<ibv_event_type>(event_type)) {
    case IBV_EVENT_PORT_ERR:
      return PortSignal::kPortDown;
    case IBV_EVENT_PORT_ACTIVE:
      return PortSignal::kPortUp;
    case IBV_EVENT_DEVICE_FATAL:
      return PortSignal::kDeviceFatal;
    default:
      return PortSignal::kNone;
  }
}

int EventRouter::subscribe(const std::string& device, uint8_t port, Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_id_++;
  subscriptions_[id] = Subscription{device, port, std::move(handler)};
  return id;
}

void EventRouter::unsubscribe(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  subscriptions_.erase(id);
}

void EventRouter::route(const std::string& device, uint8_t port, PortSignal signal) {
  if (signal == PortSignal::kNone) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, sub] : subscriptions_) {
    if (sub.device != device) continue;
    if (signal != PortSignal::kDeviceFatal && sub.port != port) continue;
    sub.handler(signal);
  }
}

size_t EventRouter::subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return subscriptions_.size();
}

EventRouter& device_events() {
  static EventRouter* router = new EventRouter();  // outlives the detached watcher threads
  return *router;
}

namespace {

// Reads one device's asynchronous events for the life of the process.
void watch_loop(std::string device, ibv_context* context) {
  for (;;) {
    pollfd p{context->async_fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    ibv_async_event event;
    if (ibv_get_async_event(context, &event) != 0) continue;
    const uint8_t port = event.event_type == IBV_EVENT_PORT_ERR || event.event_type == IBV_EVENT_PORT_ACTIVE
                             ? static_cast<uint8_t>(event.element.port_num)
                             : 0;
    const PortSignal signal = classify_event(event.event_type);
    ibv_ack_async_event(&event);
    if (signal == PortSignal::kNone) continue;
    log().info("rdma: {} port {}: {}", device, port, port_signal_name(signal));
    device_events().route(device, port, signal);
  }
}

}  // namespace

Status watch_device(const std::string& device) {
  static std::mutex mu;
  static std::set<std::string>* watched = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (watched->count(device)) return Status();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return unavailable("ibv_get_device_list: {}", std::strerror(errno));
  ibv_context* context = nullptr;
  for (int i = 0; i < n && context == nullptr; ++i) {
    if (device == ibv_get_device_name(list[i])) context = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (context == nullptr) return unavailable("cannot open RDMA device {} for its events", device);
  // Non-blocking so that poll() decides, and the thread never sticks in a read.
  const int flags = fcntl(context->async_fd, F_GETFL);
  fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK);
  std::thread(watch_loop, device, context).detach();
  watched->insert(device);
  return Status();
}

}  // namespace deltacast::verbs
