#include "broadcast/transport/sim/listener.h"

namespace deltacast::sim {

SimListener::SimListener(SimNetwork* network, std::vector<Endpoint> endpoints, SliceSink* sink)
    : network_(network), endpoints_(std::move(endpoints)) {
  for (Endpoint& e : endpoints_) {
    if (e.port == 0) e.port = network_->free_port(e.host);
    network_->bind(e, sink);
  }
}

SimListener::~SimListener() { close(); }

void SimListener::close() {
  if (closed_) return;
  closed_ = true;
  for (const Endpoint& e : endpoints_) network_->unbind(e);
}

}  // namespace deltacast::sim
