// The broadcast plan: every consumer in every chain once, rotated heads so no
// uplink carries everything, slow members at the tails, and the alpha-beta
// slice size behaving as the model says.
#include "broadcast/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace deltacast {
namespace {

std::vector<PlanMember> members(uint32_t n, double rate = 0) {
  std::vector<PlanMember> out;
  for (uint32_t i = 1; i <= n; ++i) out.push_back({i * 10, rate});
  return out;
}

TEST(Planner, EveryChainHoldsEveryMemberOnceAndHeadsRotate) {
  std::mt19937 rng(5);
  for (uint32_t n = 1; n <= 9; ++n) {
    for (uint32_t stripes = 1; stripes <= 4; ++stripes) {
      auto m = members(n, 1e9);
      std::shuffle(m.begin(), m.end(), rng);
      const Plan plan = plan_chains(m, stripes);
      ASSERT_EQ(plan.stripes(), stripes);
      std::set<uint32_t> heads;
      for (const auto& chain : plan.chains) {
        ASSERT_EQ(chain.size(), n);
        EXPECT_EQ(std::set<uint32_t>(chain.begin(), chain.end()).size(), n) << "a member twice in one chain";
        heads.insert(chain.front());
      }
      EXPECT_EQ(heads.size(), std::min(n, stripes)) << n << " members, " << stripes << " stripes";
    }
  }
}

TEST(Planner, ChildIsTheNextInTheChainAndTheTailHasNone) {
  const Plan plan = plan_chains(members(4), 2);
  for (uint32_t s = 0; s < 2; ++s) {
    const auto& chain = plan.chains[s];
    for (size_t i = 0; i + 1 < chain.size(); ++i) EXPECT_EQ(plan.child(chain[i], s), chain[i + 1]);
    EXPECT_EQ(plan.child(chain.back(), s), 0u);
    EXPECT_EQ(plan.head(s), chain.front());
  }
  EXPECT_EQ(plan.child(999, 0), 0u);
}

TEST(Planner, BottleneckMembersGoToEveryTailSlowestLast) {
  auto m = members(6);
  m[0].rate = 1e9;    // a bottleneck once, but at full speed
  m[1].rate = 0.3e9;  // id 20
  m[4].rate = 0.1e9;  // id 50
  const Plan plan = plan_chains(m, 3);
  std::set<uint32_t> heads;
  for (const auto& chain : plan.chains) {
    ASSERT_EQ(chain.size(), 6u);
    EXPECT_EQ(chain[4], 20u);
    EXPECT_EQ(chain[5], 50u);
    heads.insert(chain.front());
  }
  EXPECT_EQ(heads.size(), 3u) << "the others still rotate";
}

TEST(Planner, BottlenecksAtSimilarRatesMoveNobody) {
  auto m = members(4, 1e9);
  m[0].rate = 0.8e9;
  const Plan plan = plan_chains(m, 4);
  std::set<uint32_t> heads;
  for (const auto& chain : plan.chains) heads.insert(chain.front());
  EXPECT_EQ(heads.size(), 4u);
}

TEST(Planner, ASlowMemberStaysAtTheTailsUntilItRecovers) {
  auto m = members(4);
  m[2].rate = 0.5e9;  // id 30: measured slow, the others kept up
  m[3].rate = 1e9;
  Plan plan = plan_chains(m, 4);
  ASSERT_EQ(plan.slow, std::vector<uint32_t>{30});
  // Next round, at the tails: the others kept up (0), nothing to compare with: it stays.
  m[2].slow = true;
  m[3].rate = 0;
  plan = plan_chains(m, 4);
  EXPECT_EQ(plan.slow, std::vector<uint32_t>{30});
  for (const auto& chain : plan.chains) EXPECT_EQ(chain.back(), 30u);
  // Above the slow threshold but under the recovery one: still at the tails.
  m[2].rate = 0.7e9;
  m[3].rate = 1e9;
  EXPECT_EQ(plan_chains(m, 4).slow, std::vector<uint32_t>{30});
  // Close enough to the best: back in the rotation.
  m[2].rate = 0.95e9;
  EXPECT_TRUE(plan_chains(m, 4).slow.empty());
  // It kept up (0): not slow, whatever it was.
  m[2].rate = 0;
  EXPECT_TRUE(plan_chains(m, 4).slow.empty());
}

TEST(Planner, TheChildOfASlowPortIsExplainedByItsParent) {
  // Member 30's port is slow both ways: the links 20->30 and 30->40 are both bottlenecks.
  auto m = members(5);
  m[2].rate = 0.5e9;  // id 30, measured by 20
  m[2].rate_from = 20;
  m[3].rate = 0.55e9;  // id 40, measured by 30: as slow as its parent
  m[3].rate_from = 30;
  const Plan plan = plan_chains(m, 3, 1.5e9);
  EXPECT_EQ(plan.slow, std::vector<uint32_t>{30});
}

TEST(Planner, OneUnluckyLinkOnBusyCoresMovesNobody) {
  auto m = members(5);
  m[0].rate = 1.8e9;
  m[1].rate = 1.0e9;  // 0.55 of the best, but not of the median
  m[2].rate = 1.6e9;
  m[3].rate = 1.5e9;
  EXPECT_TRUE(plan_chains(m, 4, 1.8e9).slow.empty());
}

TEST(Planner, AHealthyRateFromEarlierRoundsIsTheYardstick) {
  // Everyone downstream of the slow member was starved and kept up (0): only the remembered
  // rate says that 0.5e9 is slow.
  auto m = members(4);
  m[1].rate = 0.5e9;
  EXPECT_TRUE(plan_chains(m, 4).slow.empty()) << "nothing to compare with";
  EXPECT_EQ(plan_chains(m, 4, 1.5e9).slow, std::vector<uint32_t>{20});
  EXPECT_TRUE(plan_chains(m, 4, 0.6e9).slow.empty()) << "close to the healthy rate";
}

TEST(Planner, TheHealthyRateFollowsMembersLeftInTheChains) {
  auto m = members(3);
  m[0].rate = 1e9;
  m[1].rate = 0.2e9;
  Plan plan = plan_chains(m, 3, 0);
  ASSERT_EQ(plan.slow, std::vector<uint32_t>{20});
  EXPECT_EQ(next_reference_rate(0, m, plan), 1e9) << "the slow member is no yardstick";
  m[2].rate = 0.9e9;
  EXPECT_EQ(next_reference_rate(0, m, plan), 1e9) << "the median of those left";
  m[2].rate = 0;
  EXPECT_EQ(next_reference_rate(2e9, m, plan), 1.5e9) << "moves down gradually";
  EXPECT_EQ(next_reference_rate(0.5e9, m, plan), 1e9) << "up at once";
  for (auto& x : m) x.rate = 0;
  EXPECT_EQ(next_reference_rate(1.2e9, m, plan_chains(m, 3, 1.2e9)), 1.2e9) << "nothing measured: kept";
}

TEST(Planner, ARateDropCountsAtOnceOtherChangesAreSmoothed) {
  EXPECT_EQ(smoothed_rate(0, 5e8), 5e8);
  EXPECT_EQ(smoothed_rate(1e9, 3e8), 3e8);
  EXPECT_EQ(smoothed_rate(1e9, 8e8), 9e8);
  EXPECT_EQ(smoothed_rate(4e8, 1.2e9), 8e8);
}

TEST(Planner, EmptyInputsGiveAnEmptyPlan) {
  EXPECT_EQ(plan_chains({}, 3).stripes(), 0u);
  EXPECT_EQ(plan_chains(members(3), 0).stripes(), 0u);
}

TEST(Planner, AlphaBetaSliceSizeFollowsTheModel) {
  const double alpha = 50e-6, beta = 1.25e9;
  // Longer chains want more, smaller pieces (the pipeline fill is paid per hop).
  const uint32_t two = alpha_beta_slice_bytes(256u << 20, 2, alpha, beta);
  const uint32_t six = alpha_beta_slice_bytes(256u << 20, 6, alpha, beta);
  EXPECT_GE(two, six);
  // A power of two inside the clamp.
  for (uint32_t s : {two, six}) {
    EXPECT_EQ(s & (s - 1), 0u);
    EXPECT_GE(s, 64u << 10);
    EXPECT_LE(s, 4u << 20);
  }
  EXPECT_EQ(alpha_beta_slice_bytes(0, 4, alpha, beta), 64u << 10);
  EXPECT_EQ(alpha_beta_slice_bytes(1000, 4, alpha, beta), 64u << 10) << "clamped below";
  EXPECT_EQ(alpha_beta_slice_bytes(uint64_t{1} << 40, 2, 1.0, beta), 4u << 20) << "clamped above";
}

TEST(Planner, DefaultStripesStayBetweenOneAndFour) {
  EXPECT_EQ(default_stripes(0), 1u);
  EXPECT_EQ(default_stripes(1), 1u);
  EXPECT_EQ(default_stripes(3), 3u);
  EXPECT_EQ(default_stripes(40), 4u);
}

}  // namespace
}  // namespace deltacast
