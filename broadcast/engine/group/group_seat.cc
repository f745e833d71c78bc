#include "broadcast/engine/group/group_seat.h"

namespace deltacast {

namespace {

// The rank's tensors must be what its pieces are, tensor by tensor.
Status check_pieces(const GroupSeatOptions& o, const Manifest& manifest) {
  auto layout = Layout::resolve(o.logical, o.pieces);
  if (!layout.ok()) return layout.status().with_context(fmt::format("rank {}'s pieces", o.rank));
  const std::string diff = first_difference(manifest.tensors(), layout->local_specs());
  if (diff.empty()) return Status();
  return invalid_argument("rank {}: its tensors are not its pieces: {} (tensor vs its piece of the group)", o.rank, diff);
}

Result<std::vector<Endpoint>> advertised(const GroupSeatOptions& o, const Endpoint& control,
                                         const std::vector<Endpoint>& rails) {
  if (!o.advertise.empty()) return o.advertise;
  if (control.host != "0.0.0.0") return std::vector<Endpoint>{control};
  std::vector<Endpoint> out;
  for (const Endpoint& rail : rails) {
    if (rail.host != "0.0.0.0") out.push_back(Endpoint{rail.host, control.port});
  }
  if (out.empty()) {
    return invalid_argument("rank {}: its producer listens on every address and has no rail address to tell the "
                            "group; give the address rollout processes reach it at (advertise)", o.rank);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<GroupSeat>> GroupSeat::take(GroupSeatOptions o, const Manifest& manifest,
                                                   const Endpoint& control, const std::vector<Endpoint>& rails,
                                                   const trust::Trust& trust, const std::string& netns) {
  if (o.world == 0 || o.rank >= o.world) return invalid_argument("rank {} of a group of {} ranks", o.rank, o.world);
  if (o.coordinator.empty()) return invalid_argument("rank {}: no group coordinator address", o.rank);
  DC_RETURN_IF_ERROR(check_pieces(o, manifest));
  DC_ASSIGN_OR_RETURN(auto addresses, advertised(o, control, rails));
  std::unique_ptr<GroupSeat> seat(new GroupSeat());
  RankEntry me{o.rank, o.pieces, std::move(addresses)};
  if (o.host) {
    // The coordinator lives and dies with this process: the rank registers in-process.
    GroupCoordinatorOptions c;
    c.listen = o.coordinator.front();
    c.trust = trust;
    c.netns = netns;
    DC_ASSIGN_OR_RETURN(seat->coordinator_, GroupCoordinator::create(o.logical, o.world, c));
    DC_RETURN_IF_ERROR(seat->coordinator_->register_here(std::move(me), o.logical));
    return seat;
  }
  GroupClientOptions client;
  client.coordinators = o.coordinator;
  client.trust = trust;
  client.netns = netns;
  control::Register request;
  request.world = o.world;
  request.logical = o.logical;
  request.rank = std::move(me);
  seat->registration_ = std::make_unique<RankRegistration>(std::move(client), std::move(request), o.register_every);
  return seat;
}

GroupSeat::~GroupSeat() { leave(); }

Status GroupSeat::wait_registered(Millis timeout) {
  return registration_ ? registration_->wait(timeout) : Status();  // hosting: registered at take()
}

std::optional<Endpoint> GroupSeat::hosted_coordinator() const {
  if (!coordinator_) return std::nullopt;
  return coordinator_->address();
}

void GroupSeat::leave() {
  if (registration_) registration_->stop();
  if (coordinator_) coordinator_->close();
}

}  // namespace deltacast
