// The fake backend: channels and listeners over an in-process FakeNetwork.
#pragma once

#include "broadcast/testing/fake/wire.h"

namespace deltacast::fake {

class FakeTransport : public Transport {
 public:
  explicit FakeTransport(FakeNetwork* network) : network_(network) {}

  std::string_view name() const override { return "fake"; }
  TransportCapabilities capabilities() const override { return {true, false, 64u << 20}; }
  Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) override;
  Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                           const ListenOptions& options) override;

 private:
  FakeNetwork* network_;
};

}  // namespace deltacast::fake
