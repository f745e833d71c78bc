// The broadcast plan: every consumer in every chain once, rotated heads so no
// uplink carries everything, slow members at the tails, and the alpha-beta
// slice size behaving as the model says. Who is slow is the rate book's
// call (rate_book_test.cc).
#include "broadcast/engine/plan/planner.h"
#include "broadcast/engine/plan/uplinks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
      for (const auto& chain : plan.order) {
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
    const auto& chain = plan.order[s];
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      EXPECT_EQ(plan.children_in(chain[i], s), std::vector<uint32_t>{chain[i + 1]});
      EXPECT_EQ(plan.parent(chain[i + 1], s), chain[i]);
    }
    EXPECT_TRUE(plan.children_in(chain.back(), s).empty());
    EXPECT_EQ(plan.head(s), chain.front());
    EXPECT_EQ(plan.parent(chain.front(), s), 0u) << "the head takes it from the producer";
  }
  EXPECT_TRUE(plan.children_in(999, 0).empty());
  EXPECT_EQ(plan.children(999), (StripeChildren{{}, {}}));
  EXPECT_EQ(plan.children(plan.order[0][0]),
            (StripeChildren{{plan.order[0][1]}, plan.children_in(plan.order[0][0], 1)}));
  EXPECT_EQ(plan.depth(), 4u);
  EXPECT_EQ(plan.fanout, 1u);
}

TEST(Planner, SlowMembersGoToEveryTailSlowestLast) {
  const Plan plan = plan_chains(members(6), 3, {20, 50});
  std::set<uint32_t> heads;
  for (const auto& chain : plan.order) {
    ASSERT_EQ(chain.size(), 6u);
    EXPECT_EQ(chain[4], 20u);
    EXPECT_EQ(chain[5], 50u);
    heads.insert(chain.front());
  }
  EXPECT_EQ(heads.size(), 3u) << "the others still rotate";
  EXPECT_EQ(plan.slow, (std::vector<uint32_t>{20, 50}));
  // Each hangs from the last healthy member, not one below the other: below a slow member a
  // member takes its pace and measures as slow (a healthy one put at the tails on one noisy round
  // would stay there).
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    EXPECT_EQ(plan.parent(20, s), plan.order[s][3]);
    EXPECT_EQ(plan.parent(50, s), plan.order[s][3]);
  }
}

TEST(Planner, ManySlowMembersMakeAHeapBelowTheLastHealthyOne) {
  // 10 members, 6 slow (slowest last): two below the last healthy member, two below each of those.
  // (In trees the two hang from the healthy members whose uplinks feed the fewest: see
  // ASlowMemberInTreesHangsFromAnUplinkWithRoom.)
  const std::vector<uint32_t> slow = {40, 50, 60, 70, 80, 90};
  for (uint32_t fanout : {1u, 2u}) {
    const Plan plan = plan_trees(members(10), 2, fanout, slow);
    for (uint32_t s = 0; s < plan.stripes(); ++s) {
      const auto& order = plan.order[s];
      ASSERT_EQ(order.size(), 10u);
      const uint32_t last_healthy = order[3];
      EXPECT_EQ(std::vector<uint32_t>(order.begin() + 4, order.end()), slow);
      if (fanout == 1) {
        EXPECT_EQ(plan.parent(40, s), last_healthy);
        EXPECT_EQ(plan.parent(50, s), last_healthy);
      } else {
        for (uint32_t id : {40u, 50u}) EXPECT_TRUE(plan.parent(id, s) < 40 || plan.parent(id, s) == 100) << "from a healthy member";
      }
      EXPECT_EQ(plan.parent(60, s), 40u);
      EXPECT_EQ(plan.parent(70, s), 40u);
      EXPECT_EQ(plan.parent(80, s), 50u);
      EXPECT_EQ(plan.parent(90, s), 50u);
    }
  }
  // A node's slow member hangs from its own healthy member: the node is entered once.
  const NodeOf nodes = {{10, "a"}, {20, "a"}, {30, "b"}, {40, "b"}};
  const Plan plan = plan_chains(members(4), 2, {20}, nodes);
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    EXPECT_EQ(plan.order[s].back(), 20u);
    EXPECT_EQ(plan.parent(20, s), 10u);
  }
}

// In trees the stripe's last healthy member may forward another stripe to its full fan-out: a
// slow member hung from it loads that uplink past the busiest, and everyone below it in the other
// stripe takes its pace (over real TCP, with a member throttled to 30%, the others staged a full
// sync at about half their pace). It hangs from an uplink with room instead: the busiest uplink
// feeds no more than without it.
TEST(Planner, ASlowMemberInTreesHangsFromAnUplinkWithRoom) {
  const std::vector<uint32_t> healthy = {10, 20, 30, 40, 50};
  for (uint32_t stripes : {2u, 4u}) {
    for (uint32_t fanout : {2u, 4u}) {
      SCOPED_TRACE(fmt::format("{} stripes, fan-out {}", stripes, fanout));
      const uint32_t without = busiest_uplink(plan_trees(healthy, stripes, fanout), {});
      const Plan plan = plan_trees(members(6), stripes, fanout, {60});
      EXPECT_LE(busiest_uplink(plan, {}), without);
      for (uint32_t s = 0; s < stripes; ++s) {
        ASSERT_EQ(plan.order[s].back(), 60u);
        EXPECT_NE(plan.parent(60, s), 0u);
      }
    }
  }
  // Members of one node share its uplink; a slow member behind its node's healthy one stays there.
  const NodeOf nodes = {{10, "a"}, {20, "a"}, {30, "b"}, {40, "b"}, {50, "c"}, {60, "c"}, {70, "d"}, {80, "d"},
                        {90, "e"}, {100, "e"}, {110, "f"}};
  const Plan plan = plan_trees(members(11), 2, 2, {110, 60}, nodes);
  EXPECT_LE(busiest_uplink(plan, nodes), busiest_uplink(plan_trees(members(10), 2, 2, {60}, nodes), nodes));
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(plan.parent(60, s), 50u);
}

TEST(Planner, SlowMembersThatLeftAreLeftOut) {
  const Plan plan = plan_chains(members(3), 2, {20, 99});
  EXPECT_EQ(plan.slow, std::vector<uint32_t>{20});
  for (const auto& chain : plan.order) EXPECT_EQ(chain, (chain.front() == 10 ? std::vector<uint32_t>{10, 30, 20}
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
    for (const auto& chain : plan.order) {
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
  for (const auto& chain : plan.order) {
    EXPECT_EQ(chain.back(), 30u);
    EXPECT_EQ(nodes.at(chain[4]), "a");
    EXPECT_EQ(nodes.at(chain[5]), "a");
  }
  // Members with no node are a node each: the plan is the one without nodes.
  EXPECT_EQ(plan_chains(members(7), 4, {20, 60}, {}).order, plan_chains(members(7), 4, {20, 60}, {{999, "x"}}).order);
  NodeOf singles;
  for (uint32_t id : members(7)) singles[id] = std::to_string(id) + "n";
  EXPECT_EQ(plan_chains(members(7), 4, {20, 60}, singles).order, plan_chains(members(7), 4, {20, 60}).order);
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
    const auto& old_chain = before.order[s];
    const auto& chain = after.order[s];
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
  EXPECT_EQ(without_members(before, {}).order, before.order);
  EXPECT_EQ(without_members(before, members(40)).heads(), StripeChildren(4));
}

TEST(Planner, UnreachableMembersGoToEveryTailAndEveryoneElseKeepsTheirOrder) {
  const Plan before = plan_chains(members(6), 3);
  const Plan after = to_tails(before, {30, 999});  // 999 is in no chain
  ASSERT_EQ(after.stripes(), before.stripes());
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    auto expected = before.order[s];
    std::erase(expected, 30u);
    expected.push_back(30);
    EXPECT_EQ(after.order[s], expected) << "stripe " << s;
  }
  EXPECT_EQ(to_tails(after, {30}).order, after.order) << "moving it again changes nothing";
}

// Every stripe of a tree plan: each member once, fed by a member placed before it (the head by
// the producer), no member fanning a stripe out wider than asked.
void expect_well_formed(const Plan& plan, size_t members, uint32_t fanout, const std::string& what) {
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    const auto& order = plan.order[s];
    ASSERT_EQ(order.size(), members) << what;
    ASSERT_EQ(plan.fed_by[s].size(), members) << what;
    EXPECT_EQ(std::set<uint32_t>(order.begin(), order.end()).size(), members) << what << ": a member twice";
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0) {
        EXPECT_EQ(plan.fed_by[s][i], Plan::kFromProducer) << what;
      } else {
        EXPECT_LT(plan.fed_by[s][i], i) << what << ": fed by one placed after it";
      }
      EXPECT_LE(plan.children_in(order[i], s).size(), fanout) << what;
    }
  }
}

TEST(Planner, TreesHoldEveryMemberOnceLogKDeep) {
  std::mt19937 rng(11);
  for (uint32_t fanout : {2u, 4u, 8u}) {
    for (uint32_t n : {1u, 2u, 3u, 7u, 8u, 9u, 40u, 100u}) {
      for (uint32_t stripes : {1u, 2u, fanout}) {
        auto m = members(n);
        std::shuffle(m.begin(), m.end(), rng);
        const Plan plan = plan_trees(m, stripes, fanout);
        const std::string what = fmt::format("{} members, {} stripes, fan-out {}", n, stripes, fanout);
        ASSERT_EQ(plan.stripes(), stripes) << what;
        EXPECT_EQ(plan.fanout, fanout);
        expect_well_formed(plan, n, fanout, what);
        // The depth of a k-ary heap of n, plus the producer's hop into its head.
        EXPECT_EQ(plan.depth(), shape_load(n, stripes, fanout).fill_hops + 1) << what;
      }
    }
  }
  // 1,000 members 8 wide: 5 hops from the producer, where a chain takes 1,000.
  EXPECT_EQ(plan_trees(members(1000), 8, 8).depth(), 5u);
  EXPECT_EQ(plan_trees(members(1000), 8, 1).depth(), 1000u);
}

// The model's sends per slice (c) is the plan's: with as many stripes as the fan-out, each member
// forwards in about one stripe, so no uplink carries much more than the version.
TEST(Planner, TheModelsLoadIsThePlans) {
  for (uint32_t fanout : {1u, 2u, 4u, 8u}) {
    for (uint32_t n : {2u, 5u, 10u, 17u, 64u, 100u, 1000u}) {
      for (uint32_t stripes : {1u, 3u, fanout}) {
        const Plan plan = plan_trees(members(n), stripes, fanout);
        uint32_t most = 0;
        for (uint32_t id : members(n)) {
          uint32_t sends = 0;
          for (const auto& stripe : plan.children(id)) sends += static_cast<uint32_t>(stripe.size());
          most = std::max(most, sends);
        }
        EXPECT_EQ(most, shape_load(n, stripes, fanout).sends_per_slice)
            << n << " members, " << stripes << " stripes, fan-out " << fanout;
        if (stripes == fanout && fanout > 1 && n >= 4 * fanout) {
          EXPECT_LE(most, fanout + fanout / 2) << n << " members, fan-out " << fanout;
        }
      }
    }
  }
}

TEST(Planner, ATreeEntersEachNodeOnceAndRunsThroughItInAChain) {
  NodeOf nodes;
  for (uint32_t id : members(48)) nodes[id] = "node" + std::to_string((id / 10) % 6);  // 6 nodes of 8, interleaved
  for (uint32_t fanout : {2u, 4u}) {
    const Plan plan = plan_trees(members(48), fanout, fanout, {}, nodes);
    expect_well_formed(plan, 48, fanout + 1, "nodes");
    for (uint32_t s = 0; s < plan.stripes(); ++s) {
      std::map<std::string, int> entered;
      for (uint32_t id : plan.order[s]) {
        const uint32_t parent = plan.parent(id, s);
        if (parent == 0 || nodes.at(parent) != nodes.at(id)) ++entered[nodes.at(id)];
        // Inside a node, a chain: at most one child of the same node.
        int same = 0;
        for (uint32_t child : plan.children_in(id, s)) same += nodes.at(child) == nodes.at(id);
        EXPECT_LE(same, 1);
      }
      EXPECT_EQ(entered.size(), 6u);
      for (const auto& [node, times] : entered) EXPECT_EQ(times, 1) << node << " entered twice in stripe " << s;
    }
  }
}

// Children on other nodes each uplink feeds, over every stripe ("producer": its heads).
std::map<std::string, int> uplink_loads(const Plan& plan, const NodeOf& nodes = {}) {
  const auto node = [&](uint32_t id) { return nodes.count(id) ? nodes.at(id) : std::to_string(id); };
  std::map<std::string, int> loads;
  for (uint32_t s = 0; s < plan.stripes(); ++s) {
    for (uint32_t id : plan.order[s]) {
      const uint32_t parent = plan.parent(id, s);
      const std::string from = parent == 0 ? "producer" : node(parent);
      if (from != node(id)) ++loads[from];
    }
  }
  return loads;
}

// Hops from the producer to `id` in stripe s.
uint32_t depth_of(const Plan& plan, uint32_t id, uint32_t s) {
  uint32_t hops = 1;
  for (uint32_t parent = plan.parent(id, s); parent != 0; parent = plan.parent(parent, s)) ++hops;
  return hops;
}

// Every stripe lists parents first, holds every survivor once, and each member's parent
// survived; members whose parent survived keep it, but for those an orphan was passed down
// through (spread_orphans), which land no deeper than they were, but the last of each pass.
void expect_spliced(const Plan& before, const Plan& after, const std::vector<uint32_t>& dropped) {
  const auto dead = [&](uint32_t id) { return std::count(dropped.begin(), dropped.end(), id) != 0; };
  ASSERT_EQ(after.stripes(), before.stripes());
  for (uint32_t s = 0; s < after.stripes(); ++s) {
    size_t passed_down = 0, sank = 0;
    auto survivors = before.order[s];
    std::erase_if(survivors, dead);
    auto listed = after.order[s];
    std::sort(survivors.begin(), survivors.end());
    std::sort(listed.begin(), listed.end());
    EXPECT_EQ(listed, survivors) << "stripe " << s;
    for (size_t i = 0; i < after.order[s].size(); ++i) {
      const uint32_t id = after.order[s][i];
      EXPECT_TRUE(after.fed_by[s][i] == Plan::kFromProducer || after.fed_by[s][i] < i);
      const uint32_t parent = after.parent(id, s);
      EXPECT_FALSE(dead(parent)) << "stripe " << s << " member " << id;
      if (!dead(before.parent(id, s)) && parent != before.parent(id, s)) {
        ++passed_down;
        sank += depth_of(after, id, s) > depth_of(before, id, s);
      }
    }
    // A pass goes down at most the tree's depth; its last member may sink, one per orphan.
    size_t orphans = 0;
    for (uint32_t id : dropped) {
      if (std::count(before.order[s].begin(), before.order[s].end(), id)) orphans += before.children_in(id, s).size();
    }
    EXPECT_LE(passed_down, orphans * before.depth()) << "stripe " << s;
    EXPECT_LE(sank, orphans) << "stripe " << s;
  }
}

// No node's uplink feeds more than the busiest did before (the rate the stripes ran at), and the
// producer no more than it did.
void expect_no_uplink_carries_more(const Plan& before, const Plan& after, const NodeOf& nodes = {}) {
  const auto was = uplink_loads(before, nodes);
  int busiest = 0;
  for (const auto& [uplink, load] : was) busiest = uplink == "producer" ? busiest : std::max(busiest, load);
  for (const auto& [uplink, load] : uplink_loads(after, nodes)) {
    EXPECT_LE(load, uplink == "producer" ? was.at("producer") : busiest) << uplink;
  }
}

// A tree's uplinks are full: spliced to their nearest ancestor, a dead member's k children would
// load it with k - 1 more (a dead head's, the producer). They go to the uplinks the deaths freed.
TEST(Planner, DeathsInATreeLoadNoUplinkMoreThanBefore) {
  const Plan before = plan_trees(members(60), 4, 4, {50});
  const std::vector<uint32_t> dropped = {before.head(0), before.order[1][3], 50, 600, 999};
  const Plan after = without_members(before, dropped);
  expect_spliced(before, after, dropped);
  expect_no_uplink_carries_more(before, after);
  EXPECT_LE(after.depth(), 2 * before.depth());
  EXPECT_TRUE(after.slow.empty());
  // The producer still feeds one head a stripe: the dead head's children went elsewhere.
  for (const auto& heads : after.heads()) EXPECT_EQ(heads.size(), 1u);
  EXPECT_EQ(without_members(before, {}).order, before.order);
  // Unreachable ones hang in a chain below the last member, everyone else where they were.
  const Plan moved = to_tails(after, {after.order[2][1]});
  const uint32_t gone = after.order[2][1];
  for (uint32_t s = 0; s < moved.stripes(); ++s) {
    EXPECT_EQ(moved.order[s].back(), gone);
    EXPECT_EQ(moved.fed_by[s].back(), moved.order[s].size() - 2);
    EXPECT_TRUE(moved.children_in(gone, s).empty());
  }
}

// Members of a node share its uplink. A whole node dying frees the uplinks that fed it in every
// stripe, and its children on other nodes go there: no node's uplink carries more, every node
// is still entered once a stripe. A node's entry dying alone leaves its node's uplink free: the
// member behind it on its node takes its children. Across sites, no stripe crosses into a site
// more often than before.
TEST(Planner, ADeadNodesChildrenGoToTheUplinksItsDeathFreed) {
  NodeOf nodes;
  SiteOf sites;
  for (uint32_t id : members(96)) {
    const uint32_t node = (id / 10 - 1) / 4;  // 24 nodes of 4
    nodes[id] = fmt::format("n{}", node);
    if (node >= 16) sites[id] = "far";
  }
  const auto entered_once = [&](const Plan& plan) {
    for (uint32_t s = 0; s < plan.stripes(); ++s) {
      std::map<std::string, int> entered;
      for (uint32_t id : plan.order[s]) {
        const uint32_t parent = plan.parent(id, s);
        if (parent == 0 || nodes.at(parent) != nodes.at(id)) ++entered[nodes.at(id)];
      }
      for (const auto& [node, times] : entered) EXPECT_EQ(times, 1) << node << " entered twice in stripe " << s;
    }
  };
  const auto crossings = [&](const Plan& plan) {
    int n = 0;
    for (uint32_t s = 0; s < plan.stripes(); ++s) {
      for (uint32_t id : plan.order[s]) n += site_of(sites, plan.parent(id, s)) != site_of(sites, id);
    }
    return n;
  };
  for (uint32_t fanout : {2u, 4u}) {
    const Plan before = plan_trees(members(96), fanout, fanout, {}, nodes, sites);
    // The node whose entry forwards to the most other nodes in stripe 0.
    uint32_t busiest = before.head(0);
    size_t most = 0;
    for (uint32_t id : before.order[0]) {
      size_t remote = 0;
      for (uint32_t child : before.children_in(id, 0)) remote += nodes.at(child) != nodes.at(id);
      if (remote > most) busiest = id, most = remote;
    }
    ASSERT_GE(most, 2u);
    std::vector<uint32_t> node_dead;
    for (const auto& [id, node] : nodes) {
      if (node == nodes.at(busiest)) node_dead.push_back(id);
    }
    const Plan after = without_members(before, node_dead, nodes, sites);
    expect_spliced(before, after, node_dead);
    expect_no_uplink_carries_more(before, after, nodes);
    entered_once(after);
    EXPECT_LE(crossings(after), crossings(before));
    EXPECT_LE(after.depth(), 2 * before.depth());

    // Its entry alone: the member behind it on its node takes its children on other nodes.
    const Plan alone = without_members(before, {busiest}, nodes, sites);
    expect_spliced(before, alone, {busiest});
    expect_no_uplink_carries_more(before, alone, nodes);
    entered_once(alone);
    for (uint32_t child : before.children_in(busiest, 0)) {
      if (nodes.at(child) != nodes.at(busiest)) {
        EXPECT_EQ(nodes.at(alone.parent(child, 0)), nodes.at(busiest)) << child;
      }
    }
  }
}

// The uplinks a death frees are at the bottom of the trees. A dead member's child hung there with
// its subtree sank by the tree's depth (31 nodes 0.6 ms late at 8,192 simulated consumers); passed
// down instead, through its risen sibling's subtree, nobody sinks more than a hop.
TEST(Planner, AnOrphanIsPassedDownSoNobodySinksMoreThanAHop) {
  for (uint32_t fanout : {2u, 4u}) {
    const Plan before = plan_trees(members(255), fanout, fanout);
    for (uint32_t s = 0; s < before.stripes(); ++s) {
      // Every member forwarding in stripe s one hop below its head, dying in turn.
      for (uint32_t id : before.order[s]) {
        if (depth_of(before, id, s) != 2 || before.children_in(id, s).size() < 2) continue;
        const Plan after = without_members(before, {id});
        const std::string what = fmt::format("fan-out {}, {} dead in stripe {}", fanout, id, s);
        expect_spliced(before, after, {id});
        expect_no_uplink_carries_more(before, after);
        EXPECT_LE(after.depth(), before.depth() + 1) << what;
        for (uint32_t t = 0; t < after.stripes(); ++t) {
          for (uint32_t member : after.order[t]) {
            EXPECT_LE(depth_of(after, member, t), depth_of(before, member, t) + 1) << what << ": " << member;
          }
        }
      }
    }
  }
}

// Sites: each stripe crosses into each site once (one WAN copy of the version per site), the
// producer's site first; in chains the sites follow one another, in trees every site takes the
// stripe from an entry of the producer's site (one WAN hop). Nodes still enter once, slow members
// stay inside their site's part, and a member whose parent cannot reach it (its site's link cut)
// goes on from the last member, in another site.
TEST(Planner, EachStripeEntersEachSiteOnce) {
  std::mt19937 rng(17);
  NodeOf nodes;
  SiteOf sites;
  // 60 members on 20 nodes of 3 (interleaved ids), nodes 0-4 in the producer's site (no site
  // name), the rest in sites "east", "west" and "north".
  const char* names[] = {"", "east", "west", "north"};
  for (uint32_t id : members(60)) {
    const uint32_t node = (id / 10) % 20;
    nodes[id] = fmt::format("node{}", node);
    if (node >= 5) sites[id] = names[node / 5];
  }
  const auto site = [&](uint32_t id) { return sites.count(id) ? sites.at(id) : std::string(); };
  for (uint32_t fanout : {1u, 2u, 4u}) {
    for (uint32_t stripes : {1u, 2u, 4u}) {
      for (const std::vector<uint32_t>& slow : {std::vector<uint32_t>{}, std::vector<uint32_t>{70, 600, 20}}) {
        auto m = members(60);
        std::shuffle(m.begin(), m.end(), rng);
        const Plan plan = plan_trees(m, stripes, fanout, slow, nodes, sites);
        const std::string what = fmt::format("fan-out {}, {} stripes, {} slow", fanout, stripes, slow.size());
        ASSERT_EQ(plan.stripes(), stripes);
        for (uint32_t s = 0; s < stripes; ++s) {
          ASSERT_EQ(plan.order[s].size(), 60u) << what;
          std::map<std::string, int> site_entered, node_entered;
          for (size_t i = 0; i < plan.order[s].size(); ++i) {
            const uint32_t id = plan.order[s][i];
            const uint32_t from = plan.fed_by[s][i];
            ASSERT_TRUE(from == Plan::kFromProducer || from < i) << what;
            const uint32_t parent = plan.parent(id, s);
            if (parent == 0 || site(parent) != site(id)) ++site_entered[site(id)];
            if (parent == 0 || nodes.at(parent) != nodes.at(id)) ++node_entered[nodes.at(id)];
            // A WAN hop into a remote site comes from the producer's site in trees (in chains,
            // from the site before it).
            if (fanout > 1 && parent != 0 && site(parent) != site(id)) {
              EXPECT_EQ(site(parent), "") << what;
            }
          }
          EXPECT_EQ(site_entered.size(), 4u) << what;
          for (const auto& [name, times] : site_entered) EXPECT_EQ(times, 1) << what << ": site '" << name << "'";
          EXPECT_EQ(node_entered.size(), 20u) << what;
          for (const auto& [name, times] : node_entered) EXPECT_EQ(times, 1) << what << ": " << name;
          EXPECT_EQ(plan.heads()[s].size(), 1u) << what << ": only the producer's site takes it from the producer";
          EXPECT_EQ(site(plan.head(s)), "") << what;
        }
      }
    }
  }
  // Trees keep every site shallow: the producer's site's depth, one WAN hop, the site's own.
  const Plan tree = plan_trees(members(60), 2, 2, {}, nodes, sites);
  EXPECT_LE(tree.depth(), 3u + 1u + 3u + 2u) << "5 nodes deep at most 2 levels, 3 members a node";
  // No member in the producer's site: in trees every site takes it from the producer, in chains
  // the first does and the others from the site before.
  SiteOf away = sites;
  for (uint32_t id : members(60)) away.emplace(id, "south");
  for (uint32_t fanout : {1u, 2u}) {
    const Plan plan = plan_trees(members(60), 2, fanout, {}, nodes, away);
    for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(plan.heads()[s].size(), fanout == 1 ? 1u : 4u) << fanout;
  }
  // A remote site's entry cut off from its parent: it moves below the last member, in another site,
  // and the rest of its site below it (their parent, one by one, cut off too).
  const Plan plan = plan_trees(members(60), 2, 2, {}, nodes, sites);
  std::vector<uint32_t> cut;
  for (uint32_t id : plan.order[0]) {
    if (site(id) == "west") cut.push_back(id);
  }
  const Plan detour = to_tails(plan, cut);
  for (uint32_t s = 0; s < 2; ++s) {
    const auto& order = detour.order[s];
    const uint32_t first_moved = static_cast<uint32_t>(order.size() - cut.size());
    EXPECT_EQ(site(order[first_moved]), "west");
    EXPECT_NE(site(detour.parent(order[first_moved], s)), "west") << "the detour comes from another site";
    EXPECT_NE(site(detour.parent(order[first_moved], s)), "") << "over another site's link";
  }
  // Only west's entry of stripe 0 reported (its parent, in the producer's site, cannot reach it):
  // the rest of west moves as a block below a third site, keeping its shape, and the reported
  // member goes to the tails below its own site's block (cut off, it takes the stripe from its
  // site; hung, the block goes on without it).
  const uint32_t entry = [&] {
    for (uint32_t id : plan.order[0]) {
      if (site(id) == "west") return id;
    }
    return 0u;
  }();
  std::vector<uint32_t> moved_along;
  const Plan block = to_tails(plan, {entry, entry}, sites, &moved_along);
  EXPECT_EQ(moved_along.size(), 15u) << "west's 15 members";
  for (uint32_t s = 0; s < 2; ++s) {
    const auto& order = block.order[s];
    ASSERT_EQ(order.size(), 60u) << "the entry once, though moved twice";
    EXPECT_EQ(order.back(), entry);
    EXPECT_EQ(site(block.parent(entry, s)), "west");
    int entered = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      ASSERT_TRUE(block.fed_by[s][i] == Plan::kFromProducer || block.fed_by[s][i] < i);
      if (site(order[i]) != "west" || order[i] == entry) continue;
      const uint32_t parent = block.parent(order[i], s);
      if (site(parent) == "west") continue;
      ++entered;
      EXPECT_NE(site(parent), "") << "not from the site whose link failed";
      // Inside the block, parents are those of before (or the entry's, for its children).
      for (size_t j = i + 1; j < order.size(); ++j) {
        if (site(order[j]) == "west" && order[j] != entry) {
          const uint32_t before = plan.parent(order[j], s);
          EXPECT_TRUE(block.parent(order[j], s) == before || site(before) != "west" || before == entry) << order[j];
        }
      }
    }
    EXPECT_EQ(entered, 1) << "the block enters west once in stripe " << s;
  }
  // Without sites, the plans are those of before.
  EXPECT_EQ(plan_trees(members(60), 4, 2, {70}, nodes, {}).order, plan_trees(members(60), 4, 2, {70}, nodes).order);
}

TEST(Planner, AWanLinkFoundBrokenIsPlannedAround) {
  // e0 (1) in the producer's site, west 2-3, north 4-5, as in the namespace test of sites.
  const SiteOf sites{{2, "west"}, {3, "west"}, {4, "north"}, {5, "north"}};
  const NodeOf nodes{{1, "e0"}, {2, "w0"}, {3, "w1"}, {4, "n0"}, {5, "n1"}};
  const auto site = [&](uint32_t id) { return id == 0 ? std::string() : site_of(sites, id); };
  for (uint32_t fanout : {1u, 2u}) {
    const Plan plan = plan_trees({1, 2, 3, 4, 5}, 4, fanout, {}, nodes, sites);
    std::vector<uint32_t> moved;
    EXPECT_EQ(around_broken_links(plan, sites, {}, &moved).order, plan.order) << "nothing broken, nothing moves";
    EXPECT_TRUE(moved.empty());
    // The producer's site lost its link into north: north takes every stripe from west, once.
    const Plan around = around_broken_links(plan, sites, {{"", "north"}}, &moved);
    // (Chains pass each stripe from site to site: north's may come from west already.)
    if (fanout > 1) {
      EXPECT_EQ(moved, (std::vector<uint32_t>{4, 5}));
    }
    for (uint32_t s = 0; s < 4; ++s) {
      ASSERT_EQ(around.order[s].size(), 5u);
      int entered = 0;
      for (uint32_t id : around.order[s]) {
        const uint32_t parent = around.parent(id, s);
        if (site(id) != "north" || site(parent) == "north") continue;
        ++entered;
        EXPECT_EQ(site(parent), "west") << "fan-out " << fanout << ", stripe " << s;
      }
      EXPECT_EQ(entered, 1) << "fan-out " << fanout << ", stripe " << s;
      // West keeps its link from the producer's site.
      for (uint32_t id : {2u, 3u}) EXPECT_NE(site(around.parent(id, s)), "north");
    }
    // North cut off from both other sites: it stays in the plan (from the producer's site, the
    // last resort), every member once per stripe.
    const Plan stuck = around_broken_links(plan, sites, {{"", "north"}, {"west", "north"}});
    for (uint32_t s = 0; s < 4; ++s) EXPECT_EQ(stuck.order[s].size(), 5u);
  }
  // A reported member's site is not hung below a site whose link into it failed before: west's
  // entry reported by its parent in the producer's site, north's link into west known broken:
  // west goes below the producer's site again (its other member, e0; the report may have been
  // about the entry alone) rather than across the link known broken.
  const Plan plan = plan_trees({1, 2, 3, 4, 5}, 1, 2, {}, nodes, sites);
  const uint32_t west_entry = [&] {
    for (uint32_t id : plan.order[0]) {
      if (site(id) == "west") return id;
    }
    return 0u;
  }();
  const Plan unbroken = to_tails(plan, {west_entry}, sites);
  const Plan avoiding = to_tails(plan, {west_entry}, sites, nullptr, {{"north", "west"}});
  const auto west_parent_site = [&](const Plan& p) {
    for (uint32_t id : p.order[0]) {
      if (site(id) == "west" && site(p.parent(id, 0)) != "west") return site(p.parent(id, 0));
    }
    return std::string("none");
  };
  EXPECT_EQ(west_parent_site(unbroken), "north") << "a third site, as before";
  EXPECT_EQ(west_parent_site(avoiding), "") << "not across the link known broken";
}

// The shape per version: small versions are latency-bound (a tree's few hops win); large ones to
// few nodes bandwidth-bound (chains, where every member sends the version once, are as fast and
// sturdier).
TEST(Planner, SmallVersionsGoDownTreesAndLargeOnesToFewNodesDownChains) {
  const double rate = 400e9, alpha = 15e-6;
  const VersionShape small = version_shape(8 << 20, 8192, 1024, rate, 8, alpha, 0, 0, 0, 0);
  EXPECT_GT(small.fanout, 1u);
  EXPECT_EQ(small.stripes, small.fanout);
  const VersionShape chains = version_shape(8 << 20, 8192, 1024, rate, 8, alpha, 0, 0, 0, 1);
  EXPECT_EQ(chains.fanout, 1u);
  EXPECT_LT(small.seconds, 0.5 * chains.seconds) << "1,024 hops of latency against a few";
  const VersionShape large = version_shape(uint64_t{140} << 30, 128, 16, rate, 8, alpha, 0, 0, 0, 0);
  EXPECT_EQ(large.fanout, 1u);
  // The bound is at most a chain's, the pipelined (sqrt(S/B) + sqrt((N-1) alpha))^2, and no
  // shape beats every byte leaving the producer once.
  const double s_over_b = static_cast<double>(uint64_t{140} << 30) / rate;
  EXPECT_LE(large.bound_seconds, std::pow(std::sqrt(s_over_b) + std::sqrt(15 * alpha), 2) * (1 + 1e-12));
  EXPECT_GT(large.bound_seconds, s_over_b);
  // The bound is the best over the shapes, so no shape's time is below it, and it is the same
  // whichever shape was asked for.
  for (uint64_t bytes : {uint64_t{8} << 20, uint64_t{1} << 30, uint64_t{140} << 30}) {
    const double bound = version_shape(bytes, 8192, 1024, rate, 8, alpha, 0, 0, 0, 0).bound_seconds;
    for (uint32_t k : kFanouts) {
      const VersionShape v = version_shape(bytes, 8192, 1024, rate, 8, alpha, 0, 0, 0, k);
      EXPECT_EQ(v.fanout, k);
      EXPECT_GE(v.seconds, bound * 0.999) << bytes << " bytes, fan-out " << k;
      EXPECT_DOUBLE_EQ(v.bound_seconds, bound);
    }
  }
  // Too few nodes to fan out to: chains.
  EXPECT_EQ(version_shape(8 << 20, 2, 2, rate, 8, alpha, 0, 0, 0, 0).fanout, 1u);
}

TEST(Planner, ShapesHaveNamesThatReadBack) {
  for (uint32_t fanout : {0u, 1u, 2u, 4u, 8u}) EXPECT_EQ(parse_shape(shape_name(fanout)).value(), fanout);
  EXPECT_EQ(shape_name(1), "chains");
  EXPECT_EQ(shape_name(4), "trees:4");
  for (const char* bad : {"star", "trees", "trees:3", "trees:16", ""}) {
    const auto refused = parse_shape(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("give auto, chains, trees:2, trees:4 or trees:8"), std::string::npos);
  }
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

// Across sites, chains cross the WAN hops in a row and trees enter every site from the
// producer's: a WAN hop's latency counts (sites - 1) times in a chain's fill, once in a tree's.
// Without it the model chose chains for 64 simulated consumers on 8 nodes in 4 sites (1.32 s
// against trees' 0.79 s across 20-80 ms links).
TEST(Planner, AWansLatencyCountsOncePerSiteInChainsAndOnceInTrees) {
  const double rate = 400e9, alpha = 15e-6;
  const uint64_t bytes = uint64_t{2800} << 20;
  const WanPath wan{4, 0.03};
  const VersionShape lan = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, 0);
  EXPECT_EQ(lan.fanout, 1u) << "on one site, chains (the 8 nodes are few)";
  const VersionShape across = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, 0, wan);
  EXPECT_GT(across.fanout, 1u) << "across 4 sites, trees";
  for (uint32_t k : kFanouts) {
    if (k >= 8) continue;  // no tree 8 wide over 8 nodes
    const double without = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, k).seconds;
    const double with = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, k, wan).seconds;
    EXPECT_NEAR(with - without, (k == 1 ? 3 : 1) * wan.one_way_seconds, 1e-9) << "fan-out " << k;
  }
  // The bound has a WAN hop too; one site (or no latency measured yet) changes nothing.
  EXPECT_NEAR(across.bound_seconds - lan.bound_seconds, wan.one_way_seconds, 0.01);
  EXPECT_GE(across.bound_seconds, lan.bound_seconds + wan.one_way_seconds);
  const VersionShape one_site = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, 0, WanPath{1, 0.03});
  const VersionShape unmeasured = version_shape(bytes, 64, 8, rate, 8, alpha, 0, 0, 0, 0, WanPath{4, 0});
  for (const VersionShape& v : {one_site, unmeasured}) {
    EXPECT_EQ(v.fanout, lan.fanout);
    EXPECT_DOUBLE_EQ(v.seconds, lan.seconds);
  }
}

TEST(Planner, DefaultStripesStayBetweenOneAndFour) {
  EXPECT_EQ(default_stripes(0), 1u);
  EXPECT_EQ(default_stripes(1), 1u);
  EXPECT_EQ(default_stripes(3), 3u);
  EXPECT_EQ(default_stripes(40), 4u);
}

}  // namespace
}  // namespace deltacast
