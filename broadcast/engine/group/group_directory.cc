#include "broadcast/engine/group/group_directory.h"

#include "broadcast/engine/control/control_messages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace deltacast {

namespace {

// More ranks than this is a declaration gone wrong, not a trainer.
constexpr uint32_t kMaxWorld = control::kMaxWorld;

}  // namespace

GroupDirectory::GroupDirectory(std::vector<TensorSpec> logical, uint32_t world)
    : logical_(std::move(logical)), world_(world) {}

Result<std::unique_ptr<GroupDirectory>> GroupDirectory::create(std::vector<TensorSpec> logical, uint32_t world) {
  if (world == 0 || world > kMaxWorld) return invalid_argument("a group of {} ranks (1 to {})", world, kMaxWorld);
  if (!logical.empty()) DC_RETURN_IF_ERROR(Manifest::create(logical).status().with_context("the group's tensors"));
  return std::unique_ptr<GroupDirectory>(new GroupDirectory(std::move(logical), world));
}

Status GroupDirectory::register_rank(RankEntry entry, const std::vector<TensorSpec>& their_logical) {
  const uint32_t r = entry.rank;
  if (r >= world_) return invalid_argument("rank {} registered with a group of {} ranks", r, world_);
  if (entry.addresses.empty()) return invalid_argument("rank {} registered without an address", r);
  std::lock_guard<std::mutex> lock(mu_);
  // A coordinator told nothing of the tensors learns them from the first rank (once it is
  // accepted); every other rank must agree with it.
  const bool adopting = logical_.empty();
  const std::vector<TensorSpec>& logical = adopting ? their_logical : logical_;
  if (adopting) {
    if (their_logical.empty()) return invalid_argument("rank {} registered without the group's tensors", r);
    DC_RETURN_IF_ERROR(Manifest::create(their_logical).status().with_context(fmt::format("rank {}'s group tensors", r)));
  } else if (their_logical != logical_) {
    DC_RETURN_IF_ERROR(Manifest::create(their_logical).status().with_context(fmt::format("rank {}'s group tensors", r)));
    return mismatch("rank {} holds pieces of other tensors than the group's: {} (rank vs group)", r,
                    first_difference(their_logical, logical_));
  }
  auto layout = Layout::resolve(logical, entry.pieces);
  if (!layout.ok()) return layout.status().with_context(fmt::format("rank {}", r));
  // Its pieces against every other registered rank's: an overlap is refused now, a gap can only
  // be judged once everyone is in.
  std::vector<Layout> owners;
  std::vector<uint32_t> ids;
  for (const auto& [id, registered] : ranks_) {
    if (id == r) continue;
    owners.push_back(registered.second);
    ids.push_back(id);
  }
  owners.push_back(*layout);
  ids.push_back(r);
  DC_RETURN_IF_ERROR(check_tiling(logical, owners, /*gaps_allowed=*/true, ids));
  if (adopting) logical_ = their_logical;
  ranks_.insert_or_assign(r, std::make_pair(std::move(entry), std::move(layout).value()));
  return Status();
}

Result<GroupView> GroupDirectory::group() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ranks_.size() < world_) {
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < world_ && missing.size() < 16; ++r) {
      if (!ranks_.count(r)) missing.push_back(r);
    }
    return unavailable("the group is forming: {} of {} ranks registered (missing {}{})", ranks_.size(), world_,
                       fmt::join(missing, ", "), world_ - ranks_.size() > missing.size() ? ", ..." : "");
  }
  std::vector<Layout> owners;
  std::vector<uint32_t> ids;
  GroupView view;
  view.logical = logical_;
  for (const auto& [id, registered] : ranks_) {
    owners.push_back(registered.second);
    ids.push_back(id);
    view.ranks.push_back(registered.first);
  }
  DC_RETURN_IF_ERROR(check_tiling(logical_, owners, /*gaps_allowed=*/false, ids));
  return view;
}

size_t GroupDirectory::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_.size();
}

}  // namespace deltacast
