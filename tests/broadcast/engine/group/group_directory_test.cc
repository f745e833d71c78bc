// The group directory's state machine: ranks register their pieces (again after a restart),
// overlaps are refused at once naming the tensor and both ranks, gaps once everyone is in, a rank
// of another model or outside the world is refused, and the formed group lists every rank.
#include "broadcast/engine/group/group_directory.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

std::vector<TensorSpec> tensors() { return {{"q", DType::kBF16, {8, 4}}, {"e", DType::kF32, {10}}}; }

RankEntry rank(uint32_t r, std::vector<LocalTensorSpec> pieces, uint16_t port = 7000) {
  return RankEntry{r, std::move(pieces), {Endpoint{"10.0.0." + std::to_string(r + 1), port}}};
}

// Rank r of 2: rows 4r..4r+3 of q, a flat half of e.
std::vector<LocalTensorSpec> half(uint32_t r) {
  return {{"q", {{"q", false, 0, 4 * r, 4 * (r + 1)}}}, {"e", {{"e", true, 0, 5 * r, 5 * (r + 1)}}}};
}

TEST(GroupDirectory, FormsOnceEveryRankIsInAndTheirPiecesTile) {
  auto d = GroupDirectory::create(tensors(), 2);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto forming = (*d)->group();
  ASSERT_FALSE(forming.ok());
  EXPECT_NE(forming.status().message().find("0 of 2 ranks registered (missing 0, 1)"), std::string::npos)
      << forming.status().to_string();
  ASSERT_TRUE((*d)->register_rank(rank(1, half(1)), tensors()).ok());
  EXPECT_NE((*d)->group().status().message().find("missing 0"), std::string::npos);
  ASSERT_TRUE((*d)->register_rank(rank(0, half(0)), tensors()).ok());
  auto group = (*d)->group();
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  ASSERT_EQ(group->ranks.size(), 2u);
  EXPECT_EQ(group->ranks[0].rank, 0u);
  EXPECT_EQ(group->ranks[1].addresses[0].host, "10.0.0.2");
  EXPECT_EQ(group->logical, tensors());
  // A restarted rank registers again, at a new port: the group follows.
  ASSERT_TRUE((*d)->register_rank(rank(1, half(1), 7100), tensors()).ok());
  EXPECT_EQ((*d)->group()->ranks[1].addresses[0].port, 7100);
  EXPECT_EQ((*d)->registered(), 2u);
}

TEST(GroupDirectory, OverlapsGapsAndStrangersAreRefusedNamingTheTensorOrRank) {
  auto d = GroupDirectory::create(tensors(), 2).value();
  ASSERT_TRUE(d->register_rank(rank(0, half(0)), tensors()).ok());
  // Rank 1 claiming row 3 of q, which rank 0 owns: refused, and nothing changes.
  Status overlap = d->register_rank(rank(1, {{"q", {{"q", false, 0, 3, 8}}}, {"e", {{"e", true, 0, 5, 10}}}}), tensors());
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.message().find("'q': element 12 is owned by rank 0 and rank 1"), std::string::npos) << overlap.to_string();
  EXPECT_EQ(d->registered(), 1u);
  // Rank 1 leaving e's last element unowned: in, but the group does not form, naming the gap.
  ASSERT_TRUE(d->register_rank(rank(1, {{"q", {{"q", false, 0, 4, 8}}}, {"e", {{"e", true, 0, 5, 9}}}}), tensors()).ok());
  auto gap = d->group();
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("'e': elements [9, 10) are owned by no rank"), std::string::npos)
      << gap.status().to_string();
  // A rank outside the world, of another model, with pieces past a tensor, without an address.
  EXPECT_NE(d->register_rank(rank(2, half(1)), tensors()).message().find("rank 2"), std::string::npos);
  auto other = tensors();
  other[1].shape = {11};
  Status stranger = d->register_rank(rank(1, half(1)), other);
  EXPECT_EQ(stranger.code(), StatusCode::kMismatch);
  EXPECT_NE(stranger.message().find("'e'"), std::string::npos) << stranger.to_string();
  Status past = d->register_rank(rank(1, {{"q", {{"q", false, 0, 4, 9}}}}), tensors());
  EXPECT_NE(past.message().find("'q'"), std::string::npos) << past.to_string();
  EXPECT_FALSE(d->register_rank(RankEntry{1, half(1), {}}, tensors()).ok());
  EXPECT_FALSE(GroupDirectory::create(tensors(), 0).ok());
}

}  // namespace
}  // namespace deltacast
