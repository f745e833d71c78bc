#include "broadcast/testing/fake/transport.h"

#include "broadcast/testing/fake/channel.h"
#include "broadcast/testing/fake/listener.h"

namespace deltacast::fake {

Result<std::unique_ptr<Channel>> FakeTransport::connect(const RailSpec& rail, const ChannelOptions& options) {
  return std::unique_ptr<Channel>(new FakeChannel(network_, rail, cut_path_dial_grace(options)));
}

Result<std::unique_ptr<Listener>> FakeTransport::listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                        const ListenOptions& /*options*/) {
  for (const auto& e : endpoints) {
    if (network_->lookup(e.to_string()) != nullptr) return unavailable("{} is already bound", e.to_string());
  }
  return std::unique_ptr<Listener>(new FakeListener(network_, endpoints, sink));
}

}  // namespace deltacast::fake
