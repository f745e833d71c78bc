// The broadcast plan: every consumer in every chain once, rotated heads so no
// uplink carries everything, slow members at the tails, and the alpha-beta
// slice size behaving as the model says. Who is slow is the rate book's
// call (rate_book_test.cc).
#include "broadcast/engine/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <random>
#include <set>

namespace deltacast {
namespace {

std::vector<uint32_t> members(uint32_t n) {
  std::vector<uint32_t> out;
  for (uint32_t i = 1; i <= n; ++i) out.push_back(i * 10);
  return out;
}

TEST(Planner, EveryChainHoldsEveryMemberOnceAndHeadsRotate) {
  std::mt19937 rng(5);
  for (uint32_t n = 1; n <= 9; ++n) {
    for (uint32_t stripes = 1; stripes <= 4; ++stripes) {
      auto m = members(n);
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
      EXPECT_EQ(plan.heads().size(), stripes);
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
  EXPECT_EQ(plan.children(999), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(plan.children(plan.chains[0][0]), (std::vector<uint32_t>{plan.chains[0][1], plan.child(plan.chains[0][0], 1)}));
}

TEST(Planner, SlowMembersGoToEveryTailSlowestLast) {
  const Plan plan = plan_chains(members(6), 3, {20, 50});
  std::set<uint32_t> heads;
  for (const auto& chain : plan.chains) {
    ASSERT_EQ(chain.size(), 6u);
    EXPECT_EQ(chain[4], 20u);
    EXPECT_EQ(chain[5], 50u);
    heads.insert(chain.front());
  }
  EXPECT_EQ(heads.size(), 3u) << "the others still rotate";
  EXPECT_EQ(plan.slow, (std::vector<uint32_t>{20, 50}));
}

TEST(Planner, SlowMembersThatLeftAreLeftOut) {
  const Plan plan = plan_chains(members(3), 2, {20, 99});
  EXPECT_EQ(plan.slow, std::vector<uint32_t>{20});
  for (const auto& chain : plan.chains) EXPECT_EQ(chain, (chain.front() == 10 ? std::vector<uint32_t>{10, 30, 20}
                                                                              : std::vector<uint32_t>{30, 10, 20}));
}

// Members of one node are consecutive in every chain: each stripe crosses into each node once,
// so a node's rails carry each version once. Nodes rotate at the heads and so do the entries
// within a node; a slow member goes last in its node and its node last.
TEST(Planner, EachStripeEntersEachNodeOnce) {
  // ids interleave across nodes, so grouping is the planner's doing, not the ids'.
  const NodeOf nodes = {{10, "a"}, {20, "b"}, {30, "a"}, {40, "b"}, {50, "a"}, {60, "b"}, {70, "c"}};
  for (uint32_t stripes = 1; stripes <= 6; ++stripes) {
    const Plan plan = plan_chains(members(7), stripes, {}, nodes);
    std::set<std::string> head_nodes;
    std::map<std::string, std::set<uint32_t>> entries;
    for (const auto& chain : plan.chains) {
      ASSERT_EQ(chain.size(), 7u);
      std::vector<std::string> order;  // node of each position, runs collapsed
      for (uint32_t id : chain) {
        if (order.empty() || order.back() != nodes.at(id)) {
          order.push_back(nodes.at(id));
          entries[nodes.at(id)].insert(id);
        }
      }
      EXPECT_EQ(order.size(), 3u) << "a node entered twice in stripes " << stripes;
      head_nodes.insert(nodes.at(chain.front()));
    }
    EXPECT_EQ(head_nodes.size(), std::min<size_t>(3, stripes)) << stripes << " stripes";
    if (stripes >= 3) {
      EXPECT_EQ(entries["a"].size(), 3u) << "each of a's members is an entry for some stripe";
    }
  }
  // A slow member: last within its node, and its node last in every chain.
  const Plan plan = plan_chains(members(7), 4, {30}, nodes);
  for (const auto& chain : plan.chains) {
    EXPECT_EQ(chain.back(), 30u);
    EXPECT_EQ(nodes.at(chain[4]), "a");
    EXPECT_EQ(nodes.at(chain[5]), "a");
  }
  // Members with no node are a node each: the plan is the one without nodes.
  EXPECT_EQ(plan_chains(members(7), 4, {20, 60}, {}).chains, plan_chains(members(7), 4, {20, 60}, {{999, "x"}}).chains);
  NodeOf singles;
  for (uint32_t id : members(7)) singles[id] = std::to_string(id) + "n";
  EXPECT_EQ(plan_chains(members(7), 4, {20, 60}, singles).chains, plan_chains(members(7), 4, {20, 60}).chains);
}

TEST(Planner, MembersThatDieAreSplicedOutAndEveryoneElseKeepsAParentAheadOfIt) {
  NodeOf nodes;
  for (uint32_t id : members(40)) nodes[id] = "node" + std::to_string(id / 30);
  const Plan before = plan_chains(members(40), 4, {70}, nodes);
  const std::vector<uint32_t> dropped = {10, 130, 70, 400, 999};  // a head, a middle one, the slow one, the last, a stranger
  const Plan after = without_members(before, dropped);
  ASSERT_EQ(after.stripes(), before.stripes());
  EXPECT_TRUE(after.slow.empty());
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    const auto& old_chain = before.chains[s];
    const auto& chain = after.chains[s];
    EXPECT_EQ(chain.size(), old_chain.size() - 4) << "stripe " << s;
    const auto position = [&](uint32_t id) { return std::find(old_chain.begin(), old_chain.end(), id) - old_chain.begin(); };
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(std::count(dropped.begin(), dropped.end(), chain[i]), 0) << "stripe " << s;
      // In the old order, so whoever feeds a member now was ahead of it and of its old parent.
      if (i > 0) {
        EXPECT_LT(position(chain[i - 1]), position(chain[i])) << "stripe " << s;
      }
    }
    // Only the dead members' children have a new parent.
    for (size_t i = 1; i < chain.size(); ++i) {
      const auto old_parent = old_chain[position(chain[i]) - 1];
      if (chain[i - 1] != old_parent) {
        EXPECT_EQ(std::count(dropped.begin(), dropped.end(), old_parent), 1) << "stripe " << s << " member " << chain[i];
      }
    }
  }
  EXPECT_EQ(without_members(before, {}).chains, before.chains);
  EXPECT_EQ(without_members(before, members(40)).heads(), std::vector<uint32_t>(4, 0));
}

TEST(Planner, UnreachableMembersGoToEveryTailAndEveryoneElseKeepsTheirOrder) {
  const Plan before = plan_chains(members(6), 3);
  const Plan after = to_tails(before, {30, 999});  // 999 is in no chain
  ASSERT_EQ(after.stripes(), before.stripes());
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    auto expected = before.chains[s];
    std::erase(expected, 30u);
    expected.push_back(30);
    EXPECT_EQ(after.chains[s], expected) << "stripe " << s;
  }
  EXPECT_EQ(to_tails(after, {30}).chains, after.chains) << "moving it again changes nothing";
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
  // Whole 64 KiB hash leaves inside the clamp.
  for (uint32_t s : {two, six}) {
    EXPECT_EQ(s % (64u << 10), 0u);
    EXPECT_GE(s, 64u << 10);
    EXPECT_LE(s, 4u << 20);
  }
  EXPECT_EQ(alpha_beta_slice_bytes(0, 4, alpha, beta), 64u << 10);
  EXPECT_EQ(alpha_beta_slice_bytes(1000, 4, alpha, beta), 64u << 10) << "clamped below";
  EXPECT_EQ(alpha_beta_slice_bytes(uint64_t{1} << 40, 2, 1.0, beta), 4u << 20) << "clamped above";
}

// The size follows the rate smoothly: rates 5% apart give slices about 2.5% apart, not 2x (a
// power of two did, at 8192 members between 40 and 42 GB/s a rail: 2 MiB against 4 MiB, and a
// slow node that lowered the measured rate by that much moved every consumer by 10%).
TEST(Planner, AlphaBetaSliceSizeHasNoCliff) {
  const uint64_t stripe = 35'000'000'000;
  const double lower = alpha_beta_slice_bytes(stripe, 8192, 100e-6, 40e9);
  const double higher = alpha_beta_slice_bytes(stripe, 8192, 100e-6, 42e9);
  EXPECT_GT(lower, 0.95 * higher);
  EXPECT_LE(lower, higher);
  EXPECT_GT(lower, 3.9e6);
}

// A version's shape: a slice crosses each hop over one rail, so its size is modelled at one
// rail's rate: the more rails share a member's rate, the smaller the slices (0.5 GB through 1024
// members at 400 GB/s over 8 rails: 1 MiB, where the whole rate gave 4 MiB).
TEST(Planner, AVersionsSlicesAreSizedForOneRail) {
  const uint64_t bytes = 2800ull << 20;
  const VersionShape one = version_shape(bytes, 1024, 1024, 400e9, 1, 100e-6);
  const VersionShape eight = version_shape(bytes, 1024, 1024, 400e9, 8, 100e-6);
  EXPECT_EQ(one.stripes, 4u);
  EXPECT_EQ(one.slice_bytes, alpha_beta_slice_bytes(bytes / 4, 1024, 100e-6, 400e9));
  EXPECT_EQ(eight.slice_bytes, alpha_beta_slice_bytes(bytes / 4, 1024, 100e-6, 50e9));
  EXPECT_LT(eight.slice_bytes, one.slice_bytes);
  // Given stripes and slices stand; never more stripes than slices.
  EXPECT_EQ(version_shape(bytes, 1024, 1024, 400e9, 8, 100e-6, 2, 1 << 20).stripes, 2u);
  EXPECT_EQ(version_shape(bytes, 1024, 1024, 400e9, 8, 100e-6, 2, 1 << 20).slice_bytes, 1u << 20);
  EXPECT_EQ(version_shape(3 << 16, 1024, 1024, 400e9, 8, 100e-6, 0, 64 << 10).stripes, 3u);
  EXPECT_EQ(version_shape(0, 5, 5, 1e9, 2, 100e-6).stripes, 1u);
}

// Members of one node pass a version on among themselves at the node's own rate: the slices are
// sized for the chain's network hops, one per node (1024 GPUs on 128 nodes: as for 128 members).
TEST(Planner, AVersionsSlicesAreSizedForItsNetworkHopsNotItsMembers) {
  const uint64_t bytes = 2800ull << 20;
  const VersionShape by_node = version_shape(bytes, 1024, 128, 400e9, 8, 100e-6);
  const VersionShape by_member = version_shape(bytes, 1024, 1024, 400e9, 8, 100e-6);
  EXPECT_EQ(by_node.stripes, by_member.stripes) << "stripes still follow the members";
  EXPECT_EQ(by_node.slice_bytes, alpha_beta_slice_bytes(bytes / by_node.stripes, 128, 100e-6, 50e9));
  EXPECT_GT(by_node.slice_bytes, by_member.slice_bytes);
  EXPECT_EQ(version_shape(bytes, 3, 0, 1e9, 2, 100e-6).slice_bytes, version_shape(bytes, 3, 1, 1e9, 2, 100e-6).slice_bytes)
      << "no hops is one";
}

// A rate measured over slices that each cost alpha besides their bytes is taken back to the
// rate of the bytes: 1 MB slices at 10 GB/s and 100 us each move at 1 MB / 200 us = 5 GB/s.
TEST(Planner, ARateMeasuredOverSlicesIsTakenWithoutTheirCost) {
  EXPECT_NEAR(rate_without_slice_cost(5e9, 100e-6, 1'000'000), 10e9, 1e3);
  EXPECT_EQ(rate_without_slice_cost(5e9, 100e-6, 0), 5e9) << "slices not known";
  EXPECT_EQ(rate_without_slice_cost(5e9, 0, 1'000'000), 5e9) << "no cost";
  EXPECT_EQ(rate_without_slice_cost(5e9, 1e-3, 1'000'000), 20e9) << "at most 4x what was measured";
  EXPECT_EQ(rate_without_slice_cost(0, 100e-6, 1'000'000), 0);
  // version_shape sizes the slices with it: as for the rate the bytes moved at.
  const uint64_t bytes = 2800ull << 20;
  EXPECT_EQ(version_shape(bytes, 1024, 128, 8 * 5e9, 8, 100e-6, 0, 0, 1'000'000).slice_bytes,
            version_shape(bytes, 1024, 128, 8 * 10e9, 8, 100e-6).slice_bytes);
}

TEST(Planner, DefaultStripesStayBetweenOneAndFour) {
  EXPECT_EQ(default_stripes(0), 1u);
  EXPECT_EQ(default_stripes(1), 1u);
  EXPECT_EQ(default_stripes(3), 3u);
  EXPECT_EQ(default_stripes(40), 4u);
}

}  // namespace
}  // namespace deltacast
