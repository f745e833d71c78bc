// The TCP backend: one or more connections per rail, each bound to the
// rail's local address; slices framed as header + payload, read straight into
// place on the receiver.
#pragma once

#include "broadcast/transport/tcp/wire.h"

namespace deltacast::tcp {

class TcpTransport : public Transport {
 public:
  std::string_view name() const override { return "tcp"; }
  TransportCapabilities capabilities() const override { return {false, false, 64u << 20}; }
  Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) override;
  Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                           const ListenOptions& options) override;
};

}  // namespace deltacast::tcp
