// A Transport decorator for tests: every channel it opens is a FaultyChannel
// over the inner transport's, and a fault plan set for a receiver's address
// reaches every channel to that address, open now or opened later (relays
// open channels as plans change). Listening passes straight through. It goes
// by the inner transport's name, so it joins the inner transport's group.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "broadcast/testing/faulty_channel.h"
#include "broadcast/transport/transport.h"

namespace deltacast {

class FaultyTransport : public Transport {
 public:
  explicit FaultyTransport(std::shared_ptr<Transport> inner);
  ~FaultyTransport() override;

  // From now on, every channel to `remote` (an "ip:port" data endpoint) follows `plan`.
  void set_plan(const Endpoint& remote, FaultPlan plan);
  // Every channel back to passing everything through.
  void clear();
  // Sends made through channels to `remote` so far (all of its channels, open or closed).
  uint64_t sends_to(const Endpoint& remote) const;

  std::string_view name() const override { return inner_->name(); }
  TransportCapabilities capabilities() const override { return inner_->capabilities(); }
  Result<std::unique_ptr<Channel>> connect(const RailSpec& rail, const ChannelOptions& options) override;
  Result<std::unique_ptr<Listener>> listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                           const ListenOptions& options) override;

  struct Registry;

 private:
  std::shared_ptr<Transport> inner_;
  std::shared_ptr<Registry> registry_;
};

}  // namespace deltacast
