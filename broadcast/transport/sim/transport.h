// The simulated backend (wire.h): the Transport a cluster simulation hands to
// the sprayer, the relays and the planner's chains, so that the code that
// ships runs against thousands of simulated hosts under a simulated clock.
// Single-threaded: everything runs on the network's event loop.
#pragma once

#include "broadcast/transport/sim/wire.h"

namespace deltacast::sim {

class SimTransport : public Transport {
 public:
  explicit SimTransport(SimNetwork* network) : network_(network) {}

  std::string_view name() const override { return "sim"; }
  TransportCapabilities capabilities() const override { return {true, false, 64u << 20}; }
  Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) override;
  Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                           const ListenOptions& options) override;

 private:
  SimNetwork* network_;
};

}  // namespace deltacast::sim
