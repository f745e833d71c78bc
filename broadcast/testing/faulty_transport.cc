#include "broadcast/testing/faulty_transport.h"

#include <set>

namespace deltacast {

class RegisteredChannel;

// The plans by receiver address and the channels open now. Shared with the channels, which
// leave it when they are destroyed (a sprayer owns them and may outlive the transport).
struct FaultyTransport::Registry {
  std::mutex mu;
  std::map<std::string, FaultPlan> plans;
  std::map<std::string, uint64_t> closed_sends;  // sends of channels gone already
  std::set<RegisteredChannel*> channels;
};

namespace {

FaultPlan plan_for(FaultyTransport::Registry& registry, const std::string& remote) {
  auto it = registry.plans.find(remote);
  return it == registry.plans.end() ? FaultPlan{} : it->second;
}

}  // namespace

// A FaultyChannel that the registry can reach while it lives.
class RegisteredChannel : public FaultyChannel {
 public:
  RegisteredChannel(std::unique_ptr<Channel> inner, std::shared_ptr<FaultyTransport::Registry> registry)
      : FaultyChannel(std::move(inner)), registry_(std::move(registry)) {
    std::lock_guard<std::mutex> lock(registry_->mu);
    set_plan(plan_for(*registry_, remote()));
    registry_->channels.insert(this);
  }
  ~RegisteredChannel() override {
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->channels.erase(this);
    registry_->closed_sends[remote()] += sends();
  }
  std::string remote() const { return rail().remote.to_string(); }

 private:
  std::shared_ptr<FaultyTransport::Registry> registry_;
};

FaultyTransport::FaultyTransport(std::shared_ptr<Transport> inner)
    : inner_(std::move(inner)), registry_(std::make_shared<Registry>()) {}

FaultyTransport::~FaultyTransport() = default;

void FaultyTransport::set_plan(const Endpoint& remote, FaultPlan plan) {
  std::lock_guard<std::mutex> lock(registry_->mu);
  registry_->plans[remote.to_string()] = plan;
  for (RegisteredChannel* c : registry_->channels) {
    if (c->remote() == remote.to_string()) c->set_plan(plan);
  }
}

void FaultyTransport::clear() {
  std::lock_guard<std::mutex> lock(registry_->mu);
  registry_->plans.clear();
  for (RegisteredChannel* c : registry_->channels) c->set_plan(FaultPlan{});
}

uint64_t FaultyTransport::sends_to(const Endpoint& remote) const {
  std::lock_guard<std::mutex> lock(registry_->mu);
  uint64_t sends = registry_->closed_sends[remote.to_string()];
  for (RegisteredChannel* c : registry_->channels) {
    if (c->remote() == remote.to_string()) sends += c->sends();
  }
  return sends;
}

Result<std::unique_ptr<Channel>> FaultyTransport::connect(const RailSpec& rail, const ChannelOptions& options) {
  DC_ASSIGN_OR_RETURN(std::unique_ptr<Channel> inner, inner_->connect(rail, options));
  return std::unique_ptr<Channel>(new RegisteredChannel(std::move(inner), registry_));
}

Result<std::unique_ptr<Listener>> FaultyTransport::listen(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                          const ListenOptions& options) {
  return inner_->listen(endpoints, sink, options);
}

}  // namespace deltacast
