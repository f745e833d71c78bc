#include "broadcast/transport/transport_select.h"

#include <mutex>

#include "broadcast/transport/tcp/transport.h"
#include "core/log.h"
#if DELTACAST_HAVE_RDMA
#include "broadcast/transport/rdma/transport.h"
#include "broadcast/transport/rdma/verbs/devices.h"
#endif

namespace deltacast {

Result<TransportChoice> open_transport(std::string_view name, bool encrypted) {
  TransportChoice choice;
  if (name == "tcp") {
    choice.transport = std::make_unique<tcp::TcpTransport>();
    return choice;
  }
  if (name != "rdma" && name != "auto") return invalid_argument("unknown transport '{}' (tcp, rdma or auto)", name);
#if DELTACAST_HAVE_RDMA
  if (encrypted && name == "auto") {
    // Not a fallback to warn of: what "auto" means for an encrypted session.
    choice.transport = std::make_unique<tcp::TcpTransport>();
    return choice;
  }
  auto ports = verbs::discover_rdma_ports();
  if (ports.ok()) {
    choice.transport = std::make_unique<rdma::RdmaTransport>();
    return choice;
  }
  choice.fallback = ports.status().message();
#else
  choice.fallback = "this build has no RDMA support (rdma-core's libibverbs-dev and librdmacm-dev were missing)";
#endif
  choice.fallback += "; using TCP";
  // Said once per process: a producer and consumers in one process would repeat it otherwise.
  static std::once_flag said;
  std::call_once(said, [&] { log().warn("{}", choice.fallback); });
  choice.transport = std::make_unique<tcp::TcpTransport>();
  return choice;
}

Result<std::shared_ptr<Transport>> resolve_transport(std::string_view name, std::shared_ptr<Transport> given,
                                                     bool encrypted) {
  if (given) return given;
  DC_ASSIGN_OR_RETURN(TransportChoice choice, open_transport(name, encrypted));
  return std::shared_ptr<Transport>(std::move(choice.transport));
}

}  // namespace deltacast
