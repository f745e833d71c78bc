// Where a sharded group's trainer ranks meet: each rank registers the pieces
// it owns of the group's logical tensors and its producer's control address;
// the group is formed once every rank of the world is in and the pieces tile
// every logical tensor exactly once. Rollout processes ask for the formed
// group (the tensors, every rank's pieces and address) before they join the
// ranks. Registrations and questions come over the network: every refusal
// names the rank or the tensor, and nothing here trusts a size. The state
// machine only; carrying it over the control protocol is the engine's part.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "broadcast/engine/group/group_view.h"

namespace deltacast {

class GroupDirectory {
 public:
  // `logical`: the group's tensors (empty: the first rank to register says what they are);
  // `world`: how many ranks it has.
  static Result<std::unique_ptr<GroupDirectory>> create(std::vector<TensorSpec> logical, uint32_t world);

  // Registers rank `entry.rank`, or registers it again (a restarted rank, at a new address). The
  // rank must be in the world, agree on the logical tensors (`their_logical`), have pieces that
  // resolve against them and overlap no other registered rank's; otherwise nothing changes.
  Status register_rank(RankEntry entry, const std::vector<TensorSpec>& their_logical);
  // The group once every rank registered and the pieces tile every tensor; otherwise why not
  // (the ranks still missing, or the tensor and elements nobody owns).
  Result<GroupView> group() const;
  uint32_t world() const { return world_; }
  size_t registered() const;

 private:
  GroupDirectory(std::vector<TensorSpec> logical, uint32_t world);

  std::vector<TensorSpec> logical_;
  uint32_t world_ = 0;
  mutable std::mutex mu_;
  std::map<uint32_t, std::pair<RankEntry, Layout>> ranks_;
};

}  // namespace deltacast
