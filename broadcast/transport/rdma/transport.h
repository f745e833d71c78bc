// The RDMA backend (rdma-core verbs and connection manager): one reliable
// connection per rail, set up over the rail's IP addresses; each slice written
// with one RDMA WRITE with immediate from the sender's memory straight to the
// place in staging the receiver granted for it (wire.h). Rails, the sprayer,
// rail health and failover are the same as over TCP.
#pragma once

#include <string>

#include "broadcast/transport/rdma/wire.h"

namespace deltacast::rdma {

struct RdmaConfig {
  uint32_t slots_per_connection = 8;        // slices offered or in flight per rail
  uint32_t max_slice_bytes = 64u << 20;     // the largest slice a receiver takes
  uint32_t max_connections = 64;            // per listener
  QpTimeouts timeouts;
};

class RdmaTransport : public Transport {
 public:
  explicit RdmaTransport(RdmaConfig config = {}) : config_(config) {}
  std::string_view name() const override { return "rdma"; }
  TransportCapabilities capabilities() const override { return {true, true, config_.max_slice_bytes}; }
  Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) override;
  Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                           const ListenOptions& options) override;

 private:
  RdmaConfig config_;
};

}  // namespace deltacast::rdma
