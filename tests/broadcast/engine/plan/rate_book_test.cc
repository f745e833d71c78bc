// The slow-member policy on reports as real runs produce them, with the
// times written down (no clock, no threads): the pattern of a machine with
// cores to spare, where only the slow member's link is ever a bottleneck, the
// pattern of two busy cores, where every link is, a sender limited by its own
// uplink, a port slow both ways, hysteresis, and reports too small to mean
// anything.
#include "broadcast/engine/plan/rate_book.h"

#include <gtest/gtest.h>

namespace deltacast {
namespace {

// A link report over 64 slices and 0.2 s of busy time.
LinkSample link(double rail_rate, double backlogged_share) {
  LinkSample s;
  s.slices = 64;
  s.bytes = 64u << 20;
  s.busy_seconds = 0.2;
  s.backlogged_seconds = backlogged_share * s.busy_seconds;
  s.rail_rate = rail_rate;
  return s;
}
LinkSample waited(double rail_rate) { return link(rail_rate, 0.9); }
LinkSample kept_up(double rail_rate) { return link(rail_rate, 0.05); }

const std::vector<uint32_t> kSix = {1, 2, 3, 4, 5, 6};

// One full sync to six consumers in chains ordered 1..6 (rotations; heads 1, 2, 4, 5), ports
// of 240 MB/s over two rails, member 6's ports throttled to 75 MB/s and placed between 5 and 1.
// This is what a 16-core machine reports: the producer's four links wait (its uplink is shared
// by four heads), 5->6 waits at 6's pace, and every other consumer link keeps up; 6->1 is slow
// because 6's uplink is. On such a machine the old policy saw one bottleneck and no healthy
// rate to compare it with, so it never found member 6.
void report_many_core_round(RateBook& book) {
  for (uint32_t head : {1u, 2u, 4u, 5u}) book.record(kProducerSender, head, waited(62e6));
  book.record(5, 6, waited(75e6));
  book.record(6, 1, kept_up(75e6));
  for (uint32_t from : {1u, 2u, 3u, 4u}) book.record(from, from + 1, kept_up(240e6));
}

TEST(RateBook, FindsASlowMemberWhenEveryHealthyLinkKeptUp) {
  RateBook book;
  report_many_core_round(book);
  book.close_round();
  const SlowVerdict verdict = book.judge(kSix);
  EXPECT_EQ(verdict.slow, std::vector<uint32_t>{6});
  EXPECT_GT(verdict.healthy, 200e6);
}

// The verdict names the slices of the last round that measured anyone (the rates count their
// per-slice cost); a round with nothing usable leaves it.
TEST(RateBook, TheVerdictNamesTheSlicesTheRatesWereMeasuredOver) {
  RateBook book;
  EXPECT_EQ(book.judge(kSix).slice_bytes, 0u);
  report_many_core_round(book);
  book.close_round(1 << 20);
  EXPECT_EQ(book.judge(kSix).slice_bytes, 1u << 20);
  LinkSample tiny = kept_up(240e6);
  tiny.slices = 2;
  book.record(1, 2, tiny);
  book.close_round(64 << 10);
  EXPECT_EQ(book.judge(kSix).slice_bytes, 1u << 20) << "a round too small to measure anyone";
}

TEST(RateBook, FindsASlowMemberWhenEveryLinkWaitsOnBusyCores) {
  // Two shared cores: the processes, not the ports, are the limit, so every link has slices
  // waiting at about the same rate, and member 6's at a third of it.
  RateBook book;
  for (uint32_t head : {1u, 2u, 4u, 5u}) book.record(kProducerSender, head, waited(40e6));
  const double rates[] = {0, 95e6, 110e6, 100e6, 105e6, 90e6};
  for (uint32_t from = 1; from <= 4; ++from) book.record(from, from + 1, waited(rates[from]));
  book.record(5, 6, waited(30e6));
  book.record(6, 1, waited(32e6));  // 6's uplink is slow too: 1 is explained by it
  book.close_round();
  EXPECT_EQ(book.judge(kSix).slow, std::vector<uint32_t>{6});
}

TEST(RateBook, SimilarRatesAndOneUnluckyLinkMoveNobody) {
  RateBook book;
  const double rates[] = {0, 1.8e9, 1.0e9, 1.6e9, 1.5e9, 0.9e9};  // 3 at 0.55 of the best, not of the median
  for (uint32_t from = 1; from <= 5; ++from) book.record(from, from % 5 + 1, waited(rates[from]));
  book.close_round();
  EXPECT_TRUE(book.judge({1, 2, 3, 4, 5}).slow.empty());
}

TEST(RateBook, ASenderWhoseLinksAllWaitedExplainsThem) {
  // The producer feeds four heads through one uplink: each link waits at a quarter of it. That
  // says nothing of the heads, which took far more from their other parents.
  RateBook book;
  for (uint32_t head : {1u, 2u, 3u, 4u}) book.record(kProducerSender, head, waited(30e6));
  for (uint32_t from : {1u, 2u, 3u}) book.record(from, from + 1, kept_up(240e6));
  book.close_round();
  EXPECT_TRUE(book.judge({1, 2, 3, 4}).slow.empty());
  // One waiting link of a sender's several is the receiver's doing.
  for (uint32_t head : {1u, 2u, 3u}) book.record(kProducerSender, head, kept_up(200e6));
  book.record(kProducerSender, 4, waited(30e6));
  for (uint32_t from : {1u, 2u}) book.record(from, from + 1, kept_up(240e6));
  book.close_round();
  EXPECT_EQ(book.judge({1, 2, 3, 4}).slow, std::vector<uint32_t>{4});
}

TEST(RateBook, TheChildOfAPortSlowBothWaysIsExplainedByIt) {
  // 3's port is slow both ways: 2->3 and 3->4 both wait at its pace.
  RateBook book;
  book.record(1, 2, kept_up(1.5e9));
  book.record(2, 3, waited(0.5e9));
  book.record(3, 4, waited(0.55e9));
  book.record(4, 5, kept_up(1.5e9));
  book.record(5, 1, kept_up(1.5e9));
  book.close_round();
  EXPECT_EQ(book.judge({1, 2, 3, 4, 5}).slow, std::vector<uint32_t>{3});
}

TEST(RateBook, AFeederHeldBackByASlowTailDoesNotExcuseIt) {
  // What two-core netns runs reported with member 6 throttled to 30% and at the tails: a feeder
  // whose relay buffers filled waiting on 6 measured as a bottleneck itself, at times under 1/0.6
  // of 6's rate (yet not slow against the others), which made 6 look "explained" by it, and 6
  // left the tails every other round. At the tails no feeder excuses it.
  RateBook book;
  const auto round = [&](double feeder_rate) {
    book.record(kProducerSender, 1, kept_up(195e6));
    book.record(1, 2, kept_up(190e6));
    book.record(2, 3, kept_up(188e6));
    book.record(3, 4, kept_up(192e6));
    book.record(4, 5, waited(feeder_rate));
    book.record(5, 6, waited(73e6));
    book.close_round();
    const SlowVerdict v = book.judge(kSix);
    book.adopt(kSix, v);
    return v.slow;
  };
  ASSERT_EQ(round(160e6), std::vector<uint32_t>{6});
  for (double feeder : {118e6, 150e6, 116e6, 119e6}) EXPECT_EQ(round(feeder), std::vector<uint32_t>{6}) << feeder;
}

TEST(RateBook, SlowestIsLast) {
  RateBook book;
  book.record(1, 2, waited(0.3e9));
  book.record(2, 3, waited(0.1e9));
  book.record(3, 4, kept_up(1e9));
  book.record(4, 5, kept_up(1e9));
  book.record(5, 1, kept_up(1e9));
  book.close_round();
  EXPECT_EQ(book.judge({1, 2, 3, 4, 5}).slow, (std::vector<uint32_t>{2, 3}));
}

TEST(RateBook, ASlowMemberStaysAtTheTailsUntilWhatItTakesRecovers) {
  RateBook book;
  const std::vector<uint32_t> four = {1, 2, 3, 4};
  const auto round = [&](LinkSample into_3) {
    book.record(1, 2, kept_up(1e9));
    book.record(2, 4, kept_up(1e9));
    book.record(4, 1, kept_up(1e9));
    book.record(4, 3, into_3);  // 3 at the tail, fed by 4
    book.close_round();
    const SlowVerdict v = book.judge(four);
    book.adopt(four, v);
    return v.slow;
  };
  ASSERT_EQ(round(waited(0.5e9)), std::vector<uint32_t>{3});
  ASSERT_TRUE(book.rates(3)->slow);
  // Above the slow threshold but under the recovery one: still at the tails.
  EXPECT_EQ(round(waited(0.7e9)), std::vector<uint32_t>{3});
  // A round too small to measure anything changes nothing.
  LinkSample tiny = waited(2e9);
  tiny.slices = 2;
  EXPECT_EQ(round(tiny), std::vector<uint32_t>{3});
  // Keeping up at a tail proves nothing while what it takes stays low (a throttled port's links
  // seldom wait on busy cores): it stays, round after round.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(round(kept_up(0.5e9)), std::vector<uint32_t>{3}) << "round " << i;
  // Keeping up at the healthy pace of the member it hangs from: recovered.
  EXPECT_TRUE(round(kept_up(0.9e9)).empty());
  EXPECT_FALSE(book.rates(3)->slow);
  // Slow again, then measured close to the others: back in the rotation at once.
  EXPECT_EQ(round(waited(0.4e9)), std::vector<uint32_t>{3});
  EXPECT_TRUE(round(waited(0.95e9)).empty());
}

// The WAN's latency for the shape model: the longest base round trip of the last measured
// round's links that the caller counts (those across sites).
TEST(RateBook, TheLongestRoundTripIsOfTheLastRoundsCountedLinks) {
  RateBook book;
  const auto any = [](uint32_t, uint32_t) { return true; };
  EXPECT_EQ(book.longest_round_trip(any), 0) << "nothing measured";
  const auto with_round_trip = [](double seconds) {
    LinkSample s = kept_up(1e9);
    s.round_trip = seconds;
    return s;
  };
  book.record(kProducerSender, 1, with_round_trip(0.0002));
  book.record(1, 2, with_round_trip(0.041));   // across a WAN
  book.record(1, 3, with_round_trip(0.083));   // across a longer one
  book.record(2, 4, with_round_trip(0.0003));
  book.close_round();
  const auto across = [](uint32_t sender, uint32_t child) { return sender == 1 && child != 1; };
  EXPECT_DOUBLE_EQ(book.longest_round_trip(across), 0.083);
  EXPECT_DOUBLE_EQ(book.longest_round_trip([](uint32_t sender, uint32_t) { return sender != 1; }), 0.0003);
  // A round without round trips (a version too small to measure) keeps the last ones.
  book.record(1, 2, kept_up(1e9));
  book.close_round();
  EXPECT_DOUBLE_EQ(book.longest_round_trip(across), 0.083);
  // A member that left takes its links along; a report's round trip is capped (untrusted input).
  book.forget(3);
  EXPECT_DOUBLE_EQ(book.longest_round_trip(across), 0.041);
  book.record(1, 2, with_round_trip(1e9));
  book.close_round();
  EXPECT_DOUBLE_EQ(book.longest_round_trip(any), kMaxRoundTripSeconds);
}

// The slowest WAN link's rate, for the choice to compress a version harder: the lowest measured
// rate of the last measured round's links the caller counts; a link too short to measure says nothing.
TEST(RateBook, TheSlowestLinkRateIsOfTheLastRoundsCountedLinks) {
  RateBook book;
  const auto any = [](uint32_t, uint32_t) { return true; };
  const auto across = [](uint32_t sender, uint32_t child) { return sender == 1 && child != 1; };
  EXPECT_EQ(book.slowest_link_rate(any), 0) << "nothing measured";
  book.record(kProducerSender, 1, kept_up(1e9));
  book.record(1, 2, kept_up(12.5e6));  // across a 100 Mbit/s WAN
  book.record(1, 3, kept_up(50e6));
  LinkSample too_short = kept_up(1e6);
  too_short.slices = 1;
  book.record(2, 4, too_short);
  book.close_round();
  EXPECT_DOUBLE_EQ(book.slowest_link_rate(across), 12.5e6);
  EXPECT_DOUBLE_EQ(book.slowest_link_rate(any), 12.5e6);
  EXPECT_DOUBLE_EQ(book.slowest_link_rate([](uint32_t sender, uint32_t) { return sender != 1; }), 1e9);
  // A round that measured nothing keeps the last rates; a member that left takes its links along.
  book.record(2, 4, too_short);
  book.close_round();
  EXPECT_DOUBLE_EQ(book.slowest_link_rate(across), 12.5e6);
  book.forget(2);
  EXPECT_DOUBLE_EQ(book.slowest_link_rate(across), 50e6);
}

TEST(RateBook, JudgingChangesNothingAndUsesTheNewestReports) {
  RateBook book;
  report_many_core_round(book);
  book.close_round();
  // A re-plan mid-round asks again: same answer, nothing adopted.
  EXPECT_EQ(book.judge(kSix).slow, std::vector<uint32_t>{6});
  EXPECT_EQ(book.judge(kSix).slow, std::vector<uint32_t>{6});
  EXPECT_FALSE(book.rates(6)->slow);
  // Who measured a member is refreshed with its rate: 6's capacity now comes from 4, as slow
  // as 4 itself, which explains it.
  book.record(3, 4, waited(80e6));
  book.record(4, 6, waited(70e6));
  book.record(6, 5, kept_up(240e6));
  book.close_round();
  EXPECT_EQ(book.rates(6)->capacity_from, 4u);
  EXPECT_EQ(book.judge(kSix).slow, std::vector<uint32_t>{4});
}

TEST(RateBook, SmallReportsAndLeaversAreLeftOut) {
  RateBook book;
  LinkSample tiny = waited(1e6);
  tiny.busy_seconds = 0.001;
  book.record(1, 2, tiny);
  book.record(2, 3, kept_up(1e9));
  book.record(3, 1, kept_up(1e9));
  book.record(2, 2, waited(1));                 // nobody reports on itself
  book.record(1, kProducerSender, waited(1));  // nor on the producer
  book.close_round();
  EXPECT_FALSE(book.rates(2).has_value()) << "a report on 2 slices says nothing";
  EXPECT_TRUE(book.judge({1, 2, 3}).slow.empty());
  report_many_core_round(book);
  book.forget(6);
  book.close_round();
  EXPECT_FALSE(book.rates(6).has_value());
  EXPECT_TRUE(book.judge({1, 2, 3, 4, 5}).slow.empty());
}

TEST(RateBook, NothingToCompareWithLeavesMembersWhereTheyAre) {
  RateBook book;
  book.record(1, 2, waited(0.2e9));
  book.close_round();
  EXPECT_TRUE(book.judge({1, 2}).slow.empty()) << "1 was never measured: no healthy rate";
  book.adopt({1, 2}, SlowVerdict{{2}, 0});
  book.record(1, 2, waited(0.2e9));
  book.close_round();
  EXPECT_EQ(book.judge({1, 2}).slow, std::vector<uint32_t>{2});
}

// In a short round only the links busy for longest are measured: the slowest ones. Their rates
// are no one's healthy rate, and judged against them nobody is slow; once most members are
// measured the healthy rate is their upper median again.
TEST(RateBook, AHealthyRateNeedsMostMembersMeasured) {
  const std::vector<uint32_t> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  RateBook book;
  LinkSample short_link = kept_up(400e9);
  short_link.busy_seconds = 0.001;  // too short to be measured
  book.record(kProducerSender, 1, kept_up(20e9));  // the producer's link, ramping the whole round
  book.record(kProducerSender, 2, waited(10e9));
  for (uint32_t id = 3; id <= 10; ++id) book.record(id - 1, id, short_link);
  book.close_round();
  ASSERT_TRUE(book.rates(1).has_value());
  EXPECT_EQ(book.judge(ten).healthy, 0) << "2 of 10 measured";
  EXPECT_DOUBLE_EQ(book.judge(ten).partial, 20e9) << "what the two took, for a round to weigh against its default";
  EXPECT_TRUE(book.judge(ten).slow.empty()) << "nothing known to compare 2 with";
  // Five of ten: still not most of them.
  for (uint32_t id = 3; id <= 5; ++id) book.record(id - 1, id, kept_up(400e9));
  book.close_round();
  EXPECT_EQ(book.judge(ten).healthy, 0);
  // Six of ten: the upper median of what they take.
  book.record(5, 6, kept_up(400e9));
  book.close_round();
  EXPECT_DOUBLE_EQ(book.judge(ten).healthy, 400e9);
  EXPECT_EQ(book.judge(ten).partial, 0);
  EXPECT_EQ(book.judge(ten).slow, std::vector<uint32_t>{2});
}

}  // namespace
}  // namespace deltacast
