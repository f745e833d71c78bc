// The soak's decisions without processes or namespaces: the fault schedule's rules and the
// ledger's verdicts (deltacast-bench soak runs them for real, tests/bench/check_soak.py).
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "soak/soak_faults.h"
#include "soak/soak_ledger.h"

namespace deltacast::bench {
namespace {

FaultScheduleOptions six_consumers(uint64_t seed) {
  FaultScheduleOptions o;
  o.hosts = {"p", "c0", "c1", "c2", "c3", "c4", "c5"};
  o.consumers = {"c0", "c1", "c2", "c3", "c4", "c5"};
  o.planes = 2;
  o.mean_interval = 2;
  o.max_consumers_down = 2;
  o.seed = seed;
  return o;
}

// Plays a schedule for `seconds`, checking its rules after every action; returns every action.
std::vector<FaultAction> play(FaultSchedule& schedule, const FaultScheduleOptions& o, double seconds) {
  std::set<std::pair<std::string, size_t>> ports_cut, ports_throttled;
  std::set<std::string> down;
  std::vector<FaultAction> all;
  double last = 0;
  for (double t = 0; t < seconds; t += 0.25) {
    for (const FaultAction& a : schedule.due(t)) {
      EXPECT_LE(a.at, t);
      EXPECT_GE(a.at, last) << "actions come in time order";
      last = a.at;
      const auto port = std::make_pair(a.host, a.plane);
      switch (a.kind) {
        case FaultKind::kRailCut: EXPECT_TRUE(ports_cut.insert(port).second); break;
        case FaultKind::kRailRestore: EXPECT_EQ(ports_cut.erase(port), 1u); break;
        case FaultKind::kRailThrottle:
          EXPECT_TRUE(ports_throttled.insert(port).second);
          EXPECT_FALSE(a.rate.empty());
          break;
        case FaultKind::kRailUnthrottle:
          EXPECT_EQ(ports_throttled.erase(port), 1u);
          EXPECT_EQ(a.rate, o.rate) << "a throttle is undone to the normal rate";
          break;
        case FaultKind::kConsumerKill:
          EXPECT_TRUE(down.insert(a.host).second) << a.host << " killed while down";
          EXPECT_NE(a.host, "p");
          break;
        case FaultKind::kConsumerRestart: EXPECT_EQ(down.erase(a.host), 1u); break;
      }
      EXPECT_LE(down.size(), o.max_consumers_down);
      // One faulted port per host, and every cut on one plane: any two hosts share a plane.
      std::map<std::string, int> per_host;
      std::set<size_t> cut_planes;
      for (const auto& p : ports_cut) {
        ++per_host[p.first];
        cut_planes.insert(p.second);
      }
      for (const auto& p : ports_throttled) ++per_host[p.first];
      for (const auto& [host, n] : per_host) EXPECT_LE(n, 1) << host;
      EXPECT_LE(cut_planes.size(), 1u) << "cuts on two planes can part two hosts";
      all.push_back(a);
    }
  }
  for (const FaultAction& a : schedule.undo_all(seconds)) {
    EXPECT_FALSE(starts_fault(a.kind));
    if (a.kind == FaultKind::kRailRestore) ports_cut.erase({a.host, a.plane});
    if (a.kind == FaultKind::kRailUnthrottle) ports_throttled.erase({a.host, a.plane});
    if (a.kind == FaultKind::kConsumerRestart) down.erase(a.host);
    all.push_back(a);
  }
  EXPECT_TRUE(ports_cut.empty() && ports_throttled.empty() && down.empty()) << "undo_all left a fault in force";
  EXPECT_TRUE(schedule.undo_all(seconds + 1).empty());
  return all;
}

TEST(SoakFaults, EveryKindComesNoTwoHostsArePartedAndEveryFaultIsUndone) {
  const auto o = six_consumers(7);
  FaultSchedule schedule(o);
  const auto all = play(schedule, o, 600);
  std::map<FaultKind, int> kinds;
  for (const auto& a : all) ++kinds[a.kind];
  EXPECT_GT(kinds[FaultKind::kRailCut], 20);
  EXPECT_GT(kinds[FaultKind::kRailThrottle], 20);
  EXPECT_GT(kinds[FaultKind::kConsumerKill], 20);
  EXPECT_EQ(kinds[FaultKind::kRailCut], kinds[FaultKind::kRailRestore]);
  EXPECT_EQ(kinds[FaultKind::kRailThrottle], kinds[FaultKind::kRailUnthrottle]);
  EXPECT_EQ(kinds[FaultKind::kConsumerKill], kinds[FaultKind::kConsumerRestart]);
}

TEST(SoakFaults, OneRailLeavesOnlyThrottlesAndTheSameSeedGivesTheSameFaults) {
  auto o = six_consumers(3);
  o.planes = 1;
  FaultSchedule a(o), b(o);
  const auto first = play(a, o, 300);
  const auto second = play(b, o, 300);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_NE(first[i].kind, FaultKind::kRailCut) << "a cut of a host's only rail";
    EXPECT_EQ(first[i].kind, second[i].kind);
    EXPECT_EQ(first[i].host, second[i].host);
    EXPECT_DOUBLE_EQ(first[i].at, second[i].at);
  }
  auto other = six_consumers(4);
  other.planes = 1;
  FaultSchedule c(other);
  const auto third = play(c, other, 300);
  EXPECT_FALSE(third.size() == first.size() && third.front().at == first.front().at) << "the seed changes nothing";
}

TEST(SoakLedger, ACommitReportedBeforeItsHashIsCheckedWhenTheHashComes) {
  SoakLedger ledger;
  ledger.held("c0", "commit", 5, 1, 0xabc, 1.0);
  ledger.held("c1", "commit", 5, 1, 0xdef, 1.0);
  EXPECT_EQ(ledger.summary()["unverified"], 2);
  EXPECT_EQ(ledger.mismatches(), 0u);
  ledger.published(5, 1, 0xabc, true, 0.9);
  EXPECT_EQ(ledger.mismatches(), 1u) << "c1's model differs from the producer's";
  const auto s = ledger.summary();
  EXPECT_EQ(s["unverified"], 0);
  EXPECT_EQ(s["verified"]["commit"], 1);
  ASSERT_EQ(s["problems"].size(), 1u);
  EXPECT_NE(s["problems"][0].get<std::string>().find("c1"), std::string::npos);
  // Another epoch's version 1 is another model.
  ledger.held("c0", "producer_lost", 6, 1, 0xabc, 2.0);
  EXPECT_EQ(ledger.summary()["unverified"], 1);
  ledger.published(6, 1, 0x123, false, 2.5);
  EXPECT_EQ(ledger.mismatches(), 2u);
  // A model of a version never published is a mismatch once the soak is over.
  ledger.held("c2", "exit", 6, 9, 0x9, 3.0);
  ledger.judge(4.0, 60, /*final=*/true);
  EXPECT_EQ(ledger.mismatches(), 3u);
  EXPECT_EQ(ledger.summary()["unverified"], 0);
}

TEST(SoakLedger, OnlyCheckAnswersAboutTheCurrentEpochCount) {
  SoakLedger ledger;
  ledger.published(5, 3, 0x1, false, 1.0);
  ledger.held("c0", "commit", 5, 3, 0x1, 1.0);
  // c1 rejoined a new producer (epoch 9) still holding epoch 5's version 3: the new producer's
  // check of its own version 3 finds other bits, and a full sync is on its way.
  ledger.published(9, 3, 0x2, false, 2.0);
  ledger.check_answer("c1", 9, 3, 3, false);
  EXPECT_EQ(ledger.mismatches(), 0u);
  ledger.held("c1", "commit", 9, 3, 0x2, 2.0);
  ledger.check_answer("c1", 9, 3, 3, true);
  ledger.check_answer("c1", 9, 4, 3, false);  // holds an older version: not an answer about 4
  EXPECT_EQ(ledger.summary()["check_answers"], 1);
  ledger.check_answer("c1", 9, 3, 3, false);
  EXPECT_EQ(ledger.mismatches(), 1u);
}

// Versions are judged from what each consumer process reported, not from the producer's view.
TEST(SoakLedger, AVersionAConsumerUpAllAlongNeverCommittedIsLost) {
  SoakLedger ledger;
  for (const char* c : {"c0", "c1", "c2", "c3"}) ledger.consumer_up(c, 0.0);
  ledger.published(1, 1, 0x1, true, 1.0);
  for (const char* c : {"c0", "c1", "c2", "c3"}) ledger.held(c, "commit", 1, 1, 0x1, 1.25);
  ledger.published(1, 2, 0x2, false, 2.0);
  ledger.held("c0", "commit", 1, 2, 0x2, 2.0625);
  ledger.consumer_down("c3", 2.5);  // killed before it had it: excused
  ledger.published(1, 3, 0x3, false, 3.0);
  ledger.held("c0", "commit", 1, 3, 0x3, 3.125);
  ledger.held("c1", "commit", 1, 3, 0x3, 3.5);  // skipped 2: holding 3 covers it
  // c2 is up all along and commits nothing after version 1.
  ledger.judge(30.0, 60, false);
  EXPECT_EQ(ledger.lost_versions(), 0u) << "judged before its time was up";
  ledger.judge(100.0, 60, false);
  const auto s = ledger.summary();
  EXPECT_EQ(ledger.lost_versions(), 2u) << s.dump();
  EXPECT_EQ(s["cut_short"], 1) << "c3 went down before version 2 reached it";
  EXPECT_EQ(s["delivered"], 4);
  EXPECT_DOUBLE_EQ(s["max_stall_ms"].get<double>(), 1500) << "c1 held version 2 only with version 3";
  EXPECT_DOUBLE_EQ(s["median_stall_ms"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(s["max_catch_up_ms"].get<double>(), 1250) << "the first commits end the catch-ups";
  EXPECT_NE(s["problems"][0].get<std::string>().find("c2"), std::string::npos);
  EXPECT_EQ(ledger.mismatches(), 0u);
}

TEST(SoakLedger, AKilledProducersLastVersionIsNotOwedAndANewEpochStartsAfresh) {
  SoakLedger ledger;
  ledger.consumer_up("c0", 0.0);
  ledger.published(1, 1, 0x1, true, 1.0);
  ledger.held("c0", "commit", 1, 1, 0x1, 1.5);
  ledger.published(1, 2, 0x2, true, 10.0);
  ledger.producer_killed(1, 2, /*in_flight=*/true, 10.0625);
  ledger.held("c0", "producer_lost", 1, 1, 0x1, 10.1);
  ledger.published(2, 1, 0x7, true, 12.0);
  ledger.held("c0", "commit", 2, 1, 0x7, 12.5);
  ledger.producer_recovered(2.5);
  ledger.published(2, 2, 0x8, false, 13.0);
  ledger.held("c0", "commit", 2, 2, 0x8, 13.25);
  ledger.fault("rail_cut");
  ledger.fault("rail_cut");
  ledger.judge(20.0, 60, /*final=*/true);
  const auto s = ledger.summary();
  EXPECT_EQ(ledger.lost_versions(), 0u) << s.dump();
  EXPECT_EQ(s["cut_short"], 1);
  EXPECT_EQ(s["producer_kills"], 1);
  EXPECT_EQ(s["producer_kills_mid_version"], 1);
  EXPECT_EQ(s["producer_epochs"], 2);
  EXPECT_DOUBLE_EQ(s["max_stall_ms"].get<double>(), 250);
  EXPECT_DOUBLE_EQ(s["max_producer_recovery_ms"].get<double>(), 2500);
  EXPECT_EQ(s["verified"]["commit"], 3);
  EXPECT_EQ(s["verified"]["producer_lost"], 1);
  EXPECT_EQ(s["faults"], 2);
  EXPECT_EQ(s["faults_by_kind"]["rail_cut"], 2);
  ledger.producer_wait_failed(2, 2, "waiting for 3 'c2' (holds 1)");
  EXPECT_EQ(ledger.lost_versions(), 1u) << "the producer's own wait failing is a lost version too";
}

}  // namespace
}  // namespace deltacast::bench
