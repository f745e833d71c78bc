#include "broadcast/fake/wire.h"

#include <cstring>

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

Result<bool> deliver(SliceSink& sink, const SliceRef& slice, const uint8_t* payload) {
  DC_ASSIGN_OR_RETURN(Landing landing, sink.begin(slice, nullptr));  // an in-memory copy cannot stall
  if (landing.bytes != nullptr) std::memcpy(landing.bytes, payload, slice.length);
  const bool verified = landing.bytes != nullptr && checksum_matches(slice, landing.bytes);
  return sink.complete(slice, landing, verified);
}

}  // namespace deltacast::fake
