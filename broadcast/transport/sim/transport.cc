#include "broadcast/transport/sim/transport.h"

#include "broadcast/transport/sim/channel.h"
#include "broadcast/transport/sim/listener.h"

namespace deltacast::sim {

Result<std::unique_ptr<Channel>> SimTransport::connect(const RailSpec& rail, const ChannelOptions& options) {
  if (rail.remote.port == 0) return invalid_argument("{}: no port to connect to", rail.to_string());
  return std::unique_ptr<Channel>(std::make_unique<SimChannel>(network_, rail, cut_path_dial_grace(options)));
}

Result<std::unique_ptr<Listener>> SimTransport::listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                       const ListenOptions&) {
  if (endpoints.empty()) return invalid_argument("no endpoint to listen on");
  if (sink == nullptr) return invalid_argument("no sink to receive into");
  return std::unique_ptr<Listener>(std::make_unique<SimListener>(network_, endpoints, sink));
}

}  // namespace deltacast::sim
