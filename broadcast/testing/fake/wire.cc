#include "broadcast/testing/fake/wire.h"

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
  links_[rail] = model;
}

LinkModel FakeNetwork::link(const std::string& rail) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(rail);
  return it == links_.end() ? LinkModel{} : it->second;
}

void FakeNetwork::set_port(const std::string& host, PortModel model) {
  std::lock_guard<std::mutex> lock(mu_);
  ports_[host].model = model;
}

bool FakeNetwork::passable(const RailSpec& rail) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto link = links_.find(rail.name);
  if (link != links_.end() && !link->second.up) return false;
  for (const std::string* host : {&rail.local.host, &rail.remote.host}) {
    auto port = ports_.find(*host);
    if (port != ports_.end() && !port->second.model.up) return false;
  }
  return true;
}

std::chrono::steady_clock::time_point FakeNetwork::transmit(const RailSpec& rail, uint32_t bytes,
                                                            std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto link_it = links_.find(rail.name);
  const LinkModel link = link_it == links_.end() ? LinkModel{} : link_it->second;
  // The slowest of the link and the two ports sets the pace; it starts once both ports are free.
  double rate = link.bytes_per_second;
  auto start = now;
  std::vector<Port*> limited;
  for (const std::string* host : {&rail.local.host, &rail.remote.host}) {
    auto port = ports_.find(*host);
    if (port == ports_.end() || port->second.model.bytes_per_second <= 0) continue;
    limited.push_back(&port->second);
    rate = rate > 0 ? std::min(rate, port->second.model.bytes_per_second) : port->second.model.bytes_per_second;
    start = std::max(start, port->second.free);
  }
  const auto serialise = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(rate > 0 ? bytes / rate : 0.0));
  for (Port* port : limited) port->free = start + serialise;
  return start + serialise + link.latency;
}

Result<bool> deliver(SliceSink& sink, const SliceRef& slice, const uint8_t* payload) {
  DC_ASSIGN_OR_RETURN(Landing landing, sink.begin(slice, nullptr));  // an in-memory copy cannot stall
  if (landing.bytes != nullptr) std::memcpy(landing.bytes, payload, slice.length);
  const bool verified = landing.bytes != nullptr && checksum_matches(slice, landing.bytes);
  return sink.complete(slice, landing, verified);
}

}  // namespace deltacast::fake
