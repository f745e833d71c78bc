#include "broadcast/testing/fake/listener.h"

namespace deltacast::fake {

FakeListener::FakeListener(FakeNetwork* network, std::vector<Endpoint> endpoints, SliceSink* sink)
    : network_(network), endpoints_(std::move(endpoints)) {
  for (const auto& e : endpoints_) network_->bind(e.to_string(), sink);
}

FakeListener::~FakeListener() { close(); }

void FakeListener::close() {
  if (closed_) return;
  closed_ = true;
  for (const auto& e : endpoints_) network_->unbind(e.to_string());
}

}  // namespace deltacast::fake
