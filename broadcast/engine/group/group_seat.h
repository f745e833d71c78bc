// A trainer rank's seat in a sharded group: what the rank says of itself to
// the group's coordinator (its pieces of the logical tensors and where its
// producer listens), kept registered for as long as the producer runs, and
// the coordinator itself when this rank hosts it (rank 0 by default).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broadcast/engine/group/group_client.h"
#include "broadcast/engine/group/group_coordinator.h"
#include "core/manifest.h"

namespace deltacast {

struct GroupSeatOptions {
  std::vector<Endpoint> coordinator;  // the group coordinator's address(es)
  bool host = false;                  // this process runs the coordinator, listening on coordinator[0]
  uint32_t rank = 0;
  uint32_t world = 0;
  std::vector<TensorSpec> logical;        // the group's tensors
  std::vector<LocalTensorSpec> pieces;    // what this rank's tensors are of them, in the manifest's order
  // Where rollout processes reach this rank's producer. Empty: its control address, or, when it
  // listens on every address (0.0.0.0), each rail's address at the control port.
  std::vector<Endpoint> advertise;
  Millis register_every{2000};
};

class GroupSeat {
 public:
  // Checks that `manifest` (the producer's tensors) is exactly what `pieces` resolve to (the
  // tensor named otherwise), starts the coordinator if this rank hosts it, and starts
  // registering. `control`: the producer's control address; `rails`: its local rail addresses.
  static Result<std::unique_ptr<GroupSeat>> take(GroupSeatOptions options, const Manifest& manifest,
                                                 const Endpoint& control, const std::vector<Endpoint>& rails,
                                                 const trust::Trust& trust, const std::string& netns);
  ~GroupSeat();

  // Until registered once (or refused for good, or `timeout`).
  Status wait_registered(Millis timeout);
  // The coordinator's address when this rank hosts it.
  std::optional<Endpoint> hosted_coordinator() const;
  void leave();

 private:
  GroupSeat() = default;

  std::unique_ptr<GroupCoordinator> coordinator_;
  std::unique_ptr<RankRegistration> registration_;
};

}  // namespace deltacast
