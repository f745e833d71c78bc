// The simulated backend's receiver: binds its endpoints to a sink in the
// network's registry (port 0: the next free simulated port).
#pragma once

#include "broadcast/transport/sim/wire.h"

namespace deltacast::sim {

class SimListener : public Listener {
 public:
  SimListener(SimNetwork* network, std::vector<Endpoint> endpoints, SliceSink* sink);
  ~SimListener() override;

  std::vector<Endpoint> endpoints() const override { return endpoints_; }
  void close() override;

 private:
  SimNetwork* network_;
  std::vector<Endpoint> endpoints_;
  bool closed_ = false;
};

}  // namespace deltacast::sim
