// Standby links between sites: one sentinel per site (its member of lowest id), every two sites
// watched once; what a sentinel reports unheard is the link between the two sites, both ways.
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
}

TEST(StandbyLinks, OneSiteOrNoneHasNoLinks) {
  EXPECT_TRUE(standby_links({1, 2, 3}, {}).empty());
  EXPECT_TRUE(standby_links({1, 2}, {{1, "west"}, {2, "west"}}).empty());
  EXPECT_TRUE(standby_links({}, {}).empty());
}

TEST(StandbyLinks, ASentinelThatLeftHasASuccessor) {
  const SiteOf sites = {{3, "west"}, {6, "west"}};
  EXPECT_EQ(standby_links({1, 3, 6}, sites), (Links{{1, {3}}}));
  EXPECT_EQ(standby_links({1, 6}, sites), (Links{{1, {6}}}));
  EXPECT_EQ(standby_links({2, 6}, sites), (Links{{2, {6}}}));
}

TEST(StandbyLinks, AnUnheardMemberMarksTheLinkBetweenTheTwoSitesBothWays) {
  const SiteOf sites = {{5, "east"}, {7, "north"}, {3, "west"}, {4, "west"}};
  // The producer's site's sentinel (2) hears no one in west; east's (5) hears no one in north.
  const BrokenLinks links = unheard_links({{2, {3}}, {5, {7}}}, sites);
  EXPECT_EQ(links, (BrokenLinks{{"", "west"}, {"west", ""}, {"east", "north"}, {"north", "east"}}));
  // One of its own site is no link between sites.
  EXPECT_TRUE(unheard_links({{3, {4}}}, sites).empty());
  EXPECT_TRUE(unheard_links({}, sites).empty());
}

}  // namespace
}  // namespace deltacast
