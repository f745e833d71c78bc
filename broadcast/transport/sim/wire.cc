#include "broadcast/transport/sim/wire.h"

#include <algorithm>
#include <cstddef>

namespace deltacast::sim {

void EventLoop::at(TimePoint when, std::function<void()> event) {
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slab_.size());
    slab_.push_back(std::move(event));
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slab_[slot] = std::move(event);
  }
  queue_.push(Key{std::max(when, now_), next_order_++, kFunction, 0, slot});
}

uint32_t EventLoop::add_target(EventTarget* target) {
  targets_.push_back(target);
  return static_cast<uint32_t>(targets_.size() - 1);
}

void EventLoop::remove_target(uint32_t target) { targets_[target] = nullptr; }

void EventLoop::at(TimePoint when, uint32_t target, uint32_t what, uint64_t arg) {
  queue_.push(Key{std::max(when, now_), next_order_++, target, what, arg});
}

uint64_t EventLoop::run(const std::function<bool()>& done, TimePoint limit) {
  uint64_t ran = 0;
  while (!queue_.empty() && !done()) {
    const Key key = queue_.top();
    if (key.when > limit) break;
    // The event leaves the queue before it runs: it may schedule others (and reuse its slot).
    queue_.pop();
    now_ = key.when;
    if (key.target == kFunction) {
      std::function<void()> event = std::move(slab_[key.arg]);
      free_slots_.push_back(static_cast<uint32_t>(key.arg));
      event();
    } else if (EventTarget* target = targets_[key.target]) {
      target->on_event(key.what, key.arg);
    }
    ++ran;
  }
  return ran;
}

uint32_t SimNetwork::port_of(const std::string& host) {
  auto [it, added] = port_index_.try_emplace(host, static_cast<uint32_t>(ports_.size()));
  if (added) ports_.emplace_back();
  return it->second;
}

void SimNetwork::set_port_up(const std::string& host, bool up) {
  Port& port = ports_[port_of(host)];
  if (port.model.up && !up) port.down_since = loop_.now();
  port.model.up = up;
}

void SimNetwork::set_port_rates(const std::string& host, double out_bytes_per_second, double in_bytes_per_second) {
  PortModel& m = ports_[port_of(host)].model;
  m.out_bytes_per_second = out_bytes_per_second;
  m.in_bytes_per_second = in_bytes_per_second;
}

uint32_t SimNetwork::node_of(const std::string& node) {
  auto [it, added] = node_index_.try_emplace(node, static_cast<uint32_t>(nodes_.size()));
  if (added) nodes_.emplace_back();
  return it->second;
}

void SimNetwork::set_node(const std::string& host, const std::string& node) {
  ports_[port_of(host)].node = static_cast<int>(node_of(node));
}

void SimNetwork::set_node_limit(const std::string& node, double bytes_per_second) {
  nodes_[node_of(node)].bytes_per_second = bytes_per_second;
}

void SimNetwork::bind(const Endpoint& endpoint, SliceSink* sink) { listeners_[endpoint.to_string()] = sink; }

void SimNetwork::unbind(const Endpoint& endpoint) {
  auto it = listeners_.find(endpoint.to_string());
  if (it != listeners_.end()) it->second = nullptr;
}

SliceSink* SimNetwork::lookup(const Endpoint& endpoint) const {
  auto it = listeners_.find(endpoint.to_string());
  return it == listeners_.end() ? nullptr : it->second;
}

SliceSink* const* SimNetwork::sink_slot(const Endpoint& endpoint) {
  // An unordered_map's elements stay where they are as it grows.
  return &listeners_.try_emplace(endpoint.to_string(), nullptr).first->second;
}

uint16_t SimNetwork::free_port(const std::string& host) {
  uint16_t& next = next_port_.try_emplace(host, uint16_t{20000}).first->second;
  while (lookup(Endpoint{host, next}) != nullptr) ++next;
  return next++;
}

TimePoint SimNetwork::hold(Share& share, double rate, uint32_t bytes, TimePoint& start) {
  if (rate <= 0) return start;
  start = std::max(start, share.free);
  share.free = start + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(bytes / rate));
  return share.free;
}

std::pair<TimePoint, TimePoint> SimNetwork::leave(uint32_t from, uint32_t bytes) {
  TimePoint start = loop_.now();
  Port& out = ports_[from];
  TimePoint done = hold(out.out, out.model.out_bytes_per_second, bytes, start);
  if (slice_cost_.count() > 0 && out.model.out_bytes_per_second > 0) {
    out.out.free += slice_cost_;  // the port is busy with the slice a little longer than its bytes take
    done = out.out.free;
  }
  if (out.node >= 0) done = std::max(done, hold(nodes_[out.node].out, nodes_[out.node].bytes_per_second, bytes, start));
  return {start, std::max(done, start)};
}

uint32_t SimNetwork::new_flow(PortSender* sender) {
  flows_.emplace_back();
  senders_.push_back(sender);
  return static_cast<uint32_t>(flows_.size() - 1);
}

void SimNetwork::forget_flow(uint32_t flow) { senders_[flow] = nullptr; }

void SimNetwork::send_out(uint32_t from, uint32_t flow, uint32_t bytes, uint64_t token) {
  const Pending slice{bytes, flow, token};
  Outbox& box = ports_[from].outbox;
  if (!box.dispatching && box.busy_until <= loop_.now()) {
    start_out(from, slice);
    return;
  }
  FlowQueue& queue = flows_[flow];
  if (queue.empty()) {
    queue.slices.clear();
    queue.head = 0;
    box.turn.push_back(flow);
  }
  queue.slices.push_back(slice);
  if (!box.dispatching) {
    box.dispatching = true;
    loop_.at(box.busy_until, self_, 0, from);
  }
}

void SimNetwork::on_event(uint32_t, uint64_t port) { next_out(static_cast<uint32_t>(port)); }

void SimNetwork::start_out(uint32_t from, Pending slice) {
  const auto [start, left] = leave(from, slice.bytes);
  ports_[from].outbox.busy_until = left;
  if (PortSender* sender = senders_[slice.flow]) sender->started(slice.token, start, left);
}

void SimNetwork::next_out(uint32_t from) {
  Outbox& box = ports_[from].outbox;
  box.dispatching = false;
  if (box.turn.empty()) return;
  const uint32_t flow = box.turn.front();
  box.turn.pop_front();
  FlowQueue& queue = flows_[flow];
  const Pending next = queue.slices[queue.head++];
  if (queue.head >= 1024 && 2 * queue.head >= queue.slices.size()) {  // a flow that never drains
    queue.slices.erase(queue.slices.begin(), queue.slices.begin() + static_cast<std::ptrdiff_t>(queue.head));
    queue.head = 0;
  }
  box.turn_bytes += next.bytes;
  if (queue.empty()) {
    box.turn_bytes = 0;
  } else if (box.turn_bytes >= kTurnBytes) {
    box.turn.push_back(flow);  // its next slices after the other flows' turns
    box.turn_bytes = 0;
  } else {
    box.turn.push_front(flow);  // its turn goes on
  }
  start_out(from, next);
  if (!box.turn.empty()) {
    box.dispatching = true;
    loop_.at(box.busy_until, self_, 0, from);
  }
}

TimePoint SimNetwork::enter(uint32_t to, uint32_t bytes, TimePoint at) {
  TimePoint start = at;
  Port& in = ports_[to];
  TimePoint done = hold(in.in, in.model.in_bytes_per_second, bytes, start);
  if (in.node >= 0) done = std::max(done, hold(nodes_[in.node].in, nodes_[in.node].bytes_per_second, bytes, start));
  return std::max(done, start);
}

TimePoint SimNetwork::transmit(uint32_t from, uint32_t to, uint32_t bytes) {
  const auto [start, left] = leave(from, bytes);
  const TimePoint across = cross(from, to, bytes, start);
  return std::max({left, across, enter(to, bytes, start)}) + latency(from, to);
}

void SimNetwork::set_site(const std::string& host, uint32_t site) {
  ports_[port_of(host)].site = static_cast<int>(site);
  if (wan_bytes_in_.size() <= site) wan_bytes_in_.resize(site + 1, 0);
}

void SimNetwork::set_wan(uint32_t site_a, uint32_t site_b, double bytes_per_second, Duration latency) {
  for (auto key : {std::make_pair(site_a, site_b), std::make_pair(site_b, site_a)}) {
    WanLink& link = wan_[key];
    link.bytes_per_second = bytes_per_second;
    link.latency = latency;
  }
}

void SimNetwork::set_wan_up(uint32_t site_a, uint32_t site_b, bool up) {
  for (auto key : {std::make_pair(site_a, site_b), std::make_pair(site_b, site_a)}) {
    const auto it = wan_.find(key);
    if (it == wan_.end()) continue;  // sites with no link given have none to cut
    if (it->second.up && !up) it->second.down_since = loop_.now();
    it->second.up = up;
  }
}

SimNetwork::WanLink* SimNetwork::wan(int a, int b) {
  if (a < 0 || b < 0 || a == b) return nullptr;
  const auto it = wan_.find({static_cast<uint32_t>(a), static_cast<uint32_t>(b)});
  return it == wan_.end() ? nullptr : &it->second;
}

const SimNetwork::WanLink* SimNetwork::wan(int a, int b) const { return const_cast<SimNetwork*>(this)->wan(a, b); }

Duration SimNetwork::latency(uint32_t from, uint32_t to) const {
  const WanLink* link = wan(ports_[from].site, ports_[to].site);
  return link == nullptr ? latency_ : link->latency;
}

bool SimNetwork::passable(uint32_t from, uint32_t to) const {
  if (!up(from) || !up(to)) return false;
  const WanLink* link = wan(ports_[from].site, ports_[to].site);
  return link == nullptr || link->up;
}

std::optional<TimePoint> SimNetwork::impassable_since(uint32_t from, uint32_t to) const {
  std::optional<TimePoint> since;
  const auto down = [&](bool up, TimePoint at) {
    if (!up) since = since ? std::min(*since, at) : at;
  };
  down(ports_[from].model.up, ports_[from].down_since);
  down(ports_[to].model.up, ports_[to].down_since);
  if (const WanLink* link = wan(ports_[from].site, ports_[to].site)) down(link->up, link->down_since);
  return since;
}

TimePoint SimNetwork::cross(uint32_t from, uint32_t to, uint32_t bytes, TimePoint at) {
  WanLink* link = wan(ports_[from].site, ports_[to].site);
  if (link == nullptr) return at;
  wan_bytes_in_[static_cast<size_t>(ports_[to].site)] += bytes;
  TimePoint start = at;
  return std::max(hold(link->share, link->bytes_per_second, bytes, start), start);
}

uint64_t SimNetwork::wan_bytes_into(uint32_t site) const { return site < wan_bytes_in_.size() ? wan_bytes_in_[site] : 0; }

}  // namespace deltacast::sim
