#include "broadcast/transport/rdma/transport.h"

#include "broadcast/transport/rdma/channel.h"
#include "broadcast/transport/rdma/listener.h"

namespace deltacast::rdma {

Result<std::unique_ptr<Channel>> RdmaTransport::connect(const RailSpec& rail, const ChannelOptions& options) {
  if (!options.netns.empty()) return unimplemented("the RDMA backend does not open connections inside network namespaces");
  DC_RETURN_IF_ERROR(refuse_encryption(options.trust.protection));
  return std::unique_ptr<Channel>(new RdmaChannel(rail, options, config_));
}

Result<std::unique_ptr<Listener>> RdmaTransport::listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                        const ListenOptions& options) {
  DC_RETURN_IF_ERROR(refuse_encryption(options.trust.protection));
  DC_ASSIGN_OR_RETURN(std::unique_ptr<RdmaListener> listener, RdmaListener::create(endpoints, sink, options, config_));
  return std::unique_ptr<Listener>(std::move(listener));
}

}  // namespace deltacast::rdma
