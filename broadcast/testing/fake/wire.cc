#include "broadcast/testing/fake/wire.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace deltacast::fake {

void FakeNetwork::bind(const std::string& address, SliceSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_[address] = sink;
}

void FakeNetwork::unbind(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(address);
}

SliceSink* FakeNetwork::lookup(const std::string& address) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(address);
  return it == listeners_.end() ? nullptr : it->second;
}

void FakeNetwork::set_link(const std::string& rail, LinkModel model) {
  std::lock_guard<std::mutex> lock(mu_);
  if (model.up) {
    link_down_since_.erase(rail);
  } else {
    link_down_since_.emplace(rail, std::chrono::steady_clock::now());  // the first time it went down
  }
  links_[rail] = model;
}

LinkModel FakeNetwork::link(const std::string& rail) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(rail);
  return it == links_.end() ? LinkModel{} : it->second;
}

void FakeNetwork::set_port(const std::string& host, PortModel model) {
  std::lock_guard<std::mutex> lock(mu_);
  Port& port = ports_[host];
  if (port.model.up && !model.up) port.down_since = std::chrono::steady_clock::now();
  port.model = model;
}

void FakeNetwork::set_path_up(const std::string& host_a, const std::string& host_b, bool up) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto pair : {std::make_pair(host_a, host_b), std::make_pair(host_b, host_a)}) {
    if (up) {
      cut_.erase(pair);
    } else {
      cut_.emplace(pair, std::chrono::steady_clock::now());  // the first time it was cut
    }
  }
}

bool FakeNetwork::passable(const RailSpec& rail) const { return !impassable_since(rail).has_value(); }

std::optional<std::chrono::steady_clock::time_point> FakeNetwork::impassable_since(const RailSpec& rail) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<TimePoint> since;
  const auto down_at = [&](TimePoint at) { since = since ? std::min(*since, at) : at; };
  if (auto link = link_down_since_.find(rail.name); link != link_down_since_.end()) down_at(link->second);
  if (auto cut = cut_.find({rail.local.host, rail.remote.host}); cut != cut_.end()) down_at(cut->second);
  for (const std::string* host : {&rail.local.host, &rail.remote.host}) {
    auto port = ports_.find(*host);
    if (port != ports_.end() && !port->second.model.up) down_at(port->second.down_since);
  }
  return since;
}

std::chrono::steady_clock::time_point FakeNetwork::transmit(const RailSpec& rail, uint32_t bytes,
                                                            std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto link_it = links_.find(rail.name);
  const LinkModel link = link_it == links_.end() ? LinkModel{} : link_it->second;
  // The slice leaves through the sender's port when it is free, enters the receiver's port when
  // that is free (not before it started leaving), each at its own rate, and crosses the link at
  // the link's; it has arrived when the slowest of the three is done.
  const auto span = [&](double rate) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(rate > 0 ? bytes / rate : 0.0));
  };
  auto arrival = now + span(link.bytes_per_second);
  auto start = now;
  const auto pass = [&](const std::string& host, bool outgoing) {
    auto port = ports_.find(host);
    if (port == ports_.end() || port->second.model.bytes_per_second <= 0) return;
    auto& free = outgoing ? port->second.out_free : port->second.in_free;
    start = std::max(start, free);
    free = start + span(port->second.model.bytes_per_second);
    arrival = std::max(arrival, free);
  };
  pass(rail.local.host, true);
  pass(rail.remote.host, false);
  carried_[{rail.local.host, rail.remote.host}] += bytes;
  return arrival + link.latency;
}

uint64_t FakeNetwork::carried(const std::string& from_host, const std::string& to_host) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = carried_.find({from_host, to_host});
  return it == carried_.end() ? 0 : it->second;
}

Result<bool> deliver(SliceSink& sink, const SliceRef& slice, const uint8_t* payload) {
  DC_ASSIGN_OR_RETURN(Landing landing, sink.begin(slice, nullptr));  // an in-memory copy cannot stall
  if (landing.bytes != nullptr) std::memcpy(landing.bytes, payload, slice.length);
  const bool verified = landing.bytes != nullptr && checksum_matches(slice, landing.bytes);
  return sink.complete(slice, landing, verified);
}

}  // namespace deltacast::fake
