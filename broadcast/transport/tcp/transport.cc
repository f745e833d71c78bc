#include "broadcast/transport/tcp/transport.h"

#include "broadcast/transport/tcp/channel.h"
#include "broadcast/transport/tcp/listener.h"

namespace deltacast::tcp {

Result<std::unique_ptr<Channel>> TcpTransport::connect(const RailSpec& rail, const ChannelOptions& options) {
  return std::unique_ptr<Channel>(new TcpChannel(rail, options));
}

Result<std::unique_ptr<Listener>> TcpTransport::listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                       const ListenOptions& options) {
  DC_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener, TcpListener::create(endpoints, sink, options));
  return std::unique_ptr<Listener>(std::move(listener));
}

}  // namespace deltacast::tcp
