// Standby links between sites: one sentinel per site (its member of lowest id; the producer, id 0,
// its own site's), every two sites watched once; what a sentinel reports unheard is the link
// between the two sites, both ways, unless the report cannot tell one detour from another.
#include "broadcast/engine/plan/standby_links.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

using Links = std::map<uint32_t, std::vector<uint32_t>>;

TEST(StandbyLinks, EachSiteSentinelWatchesTheSentinelsOfTheSitesAfterIt) {
  // The producer's site (unnamed): 4 and 2; "east": 9 and 5; "north": 7; "west": 8 and 3.
  const SiteOf sites = {{9, "east"}, {5, "east"}, {7, "north"}, {8, "west"}, {3, "west"}};
  const Links links = standby_links({4, 9, 2, 5, 7, 8, 3}, sites);
  EXPECT_EQ(links, (Links{{2, {5, 7, 3}}, {5, {7, 3}}, {7, {3}}}));
  // Every two sites once: 4 sites, 6 links.
  size_t count = 0;
  for (const auto& [sentinel, watched] : links) count += watched.size();
  EXPECT_EQ(count, 6u);
  // The producer, where it is among the members, is its own site's sentinel.
  EXPECT_EQ(standby_links({4, 9, 2, 5, 7, 8, 3, 0}, sites), (Links{{0, {5, 7, 3}}, {5, {7, 3}}, {7, {3}}}));
}

TEST(StandbyLinks, OneSiteOrNoneHasNoLinks) {
  EXPECT_TRUE(standby_links({1, 2, 3}, {}).empty());
  EXPECT_TRUE(standby_links({0, 1, 2}, {}).empty());
  EXPECT_TRUE(standby_links({1, 2}, {{1, "west"}, {2, "west"}}).empty());
  EXPECT_TRUE(standby_links({}, {}).empty());
}

TEST(StandbyLinks, ASentinelThatLeftHasASuccessor) {
  const SiteOf sites = {{3, "west"}, {6, "west"}};
  EXPECT_EQ(standby_links({0, 3, 6}, sites), (Links{{0, {3}}}));
  EXPECT_EQ(standby_links({0, 6}, sites), (Links{{0, {6}}}));
  EXPECT_EQ(standby_links({2, 6}, sites), (Links{{2, {6}}}));
}

// Four sites: the producer's (0), east (5), north (7), west (3, 4).
const SiteOf kSites = {{5, "east"}, {7, "north"}, {3, "west"}, {4, "west"}};
const Links kStandby = standby_links({0, 5, 7, 3, 4}, kSites);  // 0: 5, 7, 3; 5: 7, 3; 7: 3

TEST(StandbyLinks, AnUnheardMemberMarksTheLinkBetweenTheTwoSitesBothWays) {
  ASSERT_EQ(kStandby, (Links{{0, {5, 7, 3}}, {5, {7, 3}}, {7, {3}}}));
  // The producer hears no one in west; east hears no one in north.
  EXPECT_EQ(unheard_links({{0, {3}}, {5, {7}}}, kStandby, kSites),
            (BrokenLinks{{"", "west"}, {"west", ""}, {"east", "north"}, {"north", "east"}}));
  EXPECT_TRUE(unheard_links({}, kStandby, kSites).empty());
}

TEST(StandbyLinks, OnlyReportsOfTheLinksAsPlannedCount) {
  // West's 4 is no sentinel, 3 watches no one, and 5 does not watch 0: none of these is a link.
  EXPECT_TRUE(unheard_links({{0, {4}}, {3, {5}}, {5, {0}}, {9, {3}}}, kStandby, kSites).empty());
}

TEST(StandbyLinks, ASiteHeardOnNoneOfItsLinksTellsNothing) {
  // North heard by no one: cut off from every site, or its sentinel is. No detour into it is told
  // apart from another by that, and none of its links counts.
  EXPECT_TRUE(unheard_links({{0, {7}}, {5, {7}}, {7, {3}}}, kStandby, kSites).empty());
  // The same with one of north's links heard: north is cut off from the producer's site and east,
  // and still reaches west.
  EXPECT_EQ(unheard_links({{0, {7}}, {5, {7}}}, kStandby, kSites),
            (BrokenLinks{{"", "north"}, {"north", ""}, {"east", "north"}, {"north", "east"}}));
  // Two sites: their one link, unheard, counts (there is no other way anyway).
  const SiteOf two = {{3, "west"}};
  EXPECT_EQ(unheard_links({{0, {3}}}, standby_links({0, 3}, two), two), (BrokenLinks{{"", "west"}, {"west", ""}}));
}

}  // namespace
}  // namespace deltacast
