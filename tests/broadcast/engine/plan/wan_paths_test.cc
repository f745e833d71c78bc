// What a relay is told of the WAN into its children's sites: the round's last measurement of the
// links from other sites into each site, their rates summed (they shared that WAN) and shared among
// the new plan's links into it; links inside a site, and sites nothing measured, get nothing.
#include "broadcast/engine/plan/wan_paths.h"

#include <gtest/gtest.h>

#include "support/control_examples.h"

namespace deltacast {
namespace {

// A report long enough to be a rate (16 slices, 0.25 s busy), at `rail_rate` over `round_trip`.
LinkSample across(double rail_rate, double round_trip) {
  LinkSample s = testing::some_link_sample();
  s.rail_rate = rail_rate;
  s.round_trip = round_trip;
  return s;
}

// The producer (0) and members 1-2 in the producer's site, 3-5 in "west", 6-7 in "north".
std::string site(uint32_t id) { return id >= 6 ? "north" : id >= 3 ? "west" : ""; }

// Version 1: two stripes into west from 1 and 2 (6 GB/s and 5 GB/s, 100 and 104 ms), one into
// north from the producer (2 GB/s, 160 ms) whose round trip came back without a rate, and west's
// own links inside it. Member 2 staged before 4 had much of the version: its Staged report of
// that link is too short to be a rate, and its whole report comes later (control::Forwarded).
void measure(RateBook& book) {
  book.record(1, 3, across(6e9, 0.100), 1);
  LinkSample staged_early = across(5e9, 0.104);
  staged_early.slices = 2;  // too few to be a rate
  book.record(2, 4, staged_early, 1);
  LinkSample no_rate = across(2e9, 0.160);
  no_rate.busy_seconds = 0.001;  // too short to be a rate
  book.record(kProducerSender, 6, no_rate, 1);
  book.record(3, 5, across(40e9, 0.001), 1);
  book.close_round();
  book.record_link(2, 4, across(5e9, 0.104), 1);
}

TEST(WanPaths, TheWanIntoASiteIsItsLinksFromOtherSitesSummed) {
  RateBook book;
  measure(book);
  const auto west = book.wan_into("west", site);
  ASSERT_TRUE(west.has_value());
  EXPECT_DOUBLE_EQ(west->bytes_per_second, 11e9) << "6 + 5 GB/s; the 40 GB/s link inside west is not the WAN";
  EXPECT_DOUBLE_EQ(west->round_trip, 0.104) << "the upper median of 100 and 104 ms";
  EXPECT_FALSE(book.wan_into("north", site).has_value()) << "a round trip without a rate";
  EXPECT_FALSE(book.wan_into("", site).has_value()) << "nothing measured into the producer's site";
  // A small delta next: only links inside west measured. The WAN's measurement stands.
  book.record(3, 4, across(30e9, 0.001), 2);
  book.close_round();
  ASSERT_TRUE(book.wan_into("west", site).has_value());
  EXPECT_DOUBLE_EQ(book.wan_into("west", site)->bytes_per_second, 11e9);
  // Version 3 takes west through north's 6 alone: that link is the WAN into west now, not summed
  // with the older plan's two; a late report of that link from an older version changes nothing.
  book.record(6, 3, across(4e9, 0.150), 3);
  book.close_round();
  book.record_link(6, 3, across(9e9, 0.100), 2);
  EXPECT_DOUBLE_EQ(book.wan_into("west", site)->bytes_per_second, 4e9);
  EXPECT_DOUBLE_EQ(book.wan_into("west", site)->round_trip, 0.150);
  // A forged report: its rate counts as the most a path may be taken at, so that a plan built on
  // it is one every relay accepts.
  book.record(kProducerSender, 7, across(1e300, 0.2), 4);
  book.close_round();
  EXPECT_DOUBLE_EQ(book.wan_into("north", site)->bytes_per_second, PathEstimate::kMaxBytesPerSecond);
  const auto paths = wan_paths(book, {{kProducerSender, {{1}, {7}}}}, site);
  EXPECT_TRUE(paths_from(paths, kProducerSender).at(7).known());
  EXPECT_TRUE(paths_from(paths, 1).empty());
  // A member that leaves takes its links along.
  book.forget(6);
  EXPECT_DOUBLE_EQ(book.wan_into("west", site)->bytes_per_second, 11e9) << "the links measured before, last";
}

TEST(WanPaths, EachLinkIntoASiteGetsItsShareOfTheWanMeasuredIntoIt) {
  RateBook book;
  measure(book);
  // West cut off from the producer's site: it goes on below north's member 6 (two stripes, one
  // link each, to 3 and 4), and inside west 3 feeds 5; north takes its stripes from 1 and 2.
  const std::map<uint32_t, StripeChildren> plan = {
      {kProducerSender, {{1}, {2}}}, {1, {{6}, {}}}, {2, {{}, {7}}}, {6, {{3}, {4}}}, {3, {{5}, {}}}};
  const auto paths = wan_paths(book, plan, site);
  ASSERT_TRUE(paths.count(6));
  ASSERT_EQ(paths.at(6).size(), 2u);
  for (uint32_t child : {3u, 4u}) {
    EXPECT_DOUBLE_EQ(paths.at(6).at(child).bytes_per_second, 5.5e9) << "11 GB/s into west, two links";
    EXPECT_DOUBLE_EQ(paths.at(6).at(child).round_trip, 0.104);
  }
  EXPECT_FALSE(paths.count(3)) << "3 feeds 5 inside west";
  EXPECT_FALSE(paths.count(1)) << "nothing measured into north";
  EXPECT_FALSE(paths.count(2));
  EXPECT_FALSE(paths.count(kProducerSender)) << "1 and 2 are in the producer's site";
  // Three links into west: a third each.
  auto more = plan;
  more[7] = {{}, {5}};
  const auto shared = wan_paths(book, more, site);
  EXPECT_DOUBLE_EQ(shared.at(6).at(3).bytes_per_second, 11e9 / 3);
  EXPECT_DOUBLE_EQ(shared.at(7).at(5).bytes_per_second, 11e9 / 3);
}

}  // namespace
}  // namespace deltacast
