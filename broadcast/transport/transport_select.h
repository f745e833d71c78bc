// Picks the transport a deployment asked for, falling back to TCP (with the
// reason, for the user to read) when RDMA was asked for but this build or
// this machine has none.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "broadcast/transport/transport.h"

namespace deltacast {

struct TransportChoice {
  std::unique_ptr<Transport> transport;
  std::string fallback;  // why the request was not met, empty when it was
};

// `name`: "tcp", "rdma", or "auto" (RDMA where a device is, TCP otherwise; TCP for an encrypted
// session, as RDMA rails do not encrypt). A fallback is logged once per process and explained in
// `fallback`.
Result<TransportChoice> open_transport(std::string_view name, bool encrypted = false);

// `given` when there is one (tests hand the engine a fake backend), otherwise open_transport(name).
Result<std::shared_ptr<Transport>> resolve_transport(std::string_view name, std::shared_ptr<Transport> given,
                                                     bool encrypted = false);

}  // namespace deltacast
