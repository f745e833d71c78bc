// What a sharded group is made of, as its coordinator keeps it and sends it:
// every trainer rank's pieces of the group's logical tensors and where the
// rank's producer listens (core/layout.h says what a piece is).
#pragma once

#include <cstdint>
#include <vector>

#include "broadcast/transport/rail.h"
#include "core/layout.h"

namespace deltacast {

// One trainer rank as the group knows it.
struct RankEntry {
  uint32_t rank = 0;
  std::vector<LocalTensorSpec> pieces;
  std::vector<Endpoint> addresses;  // its producer's control address(es), tried in turn
};

// A formed group: what a rollout process needs to join every rank it takes pieces from.
struct GroupView {
  std::vector<TensorSpec> logical;
  std::vector<RankEntry> ranks;  // every rank, in rank order
};

}  // namespace deltacast
