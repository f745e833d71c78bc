// The relay over the simulated backend, where timing can be asserted: what a producer's relay
// does when its children change between versions.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include <fmt/format.h>

#include "broadcast/engine/relay.h"
#include "broadcast/transport/sim/transport.h"

namespace deltacast::sim {
namespace {

using std::chrono::microseconds;

double secs(TimePoint t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

// A receiver that records when the last of each transfer's slices arrived, and how many did.
struct TimingSink : SliceSink {
  const TimeSource* clock = nullptr;
  std::map<uint64_t, uint32_t> count;
  std::map<uint64_t, TimePoint> last;
  Result<Landing> begin(const SliceRef&, CancelReceive) override { return Landing{}; }
  bool complete(const SliceRef& slice, const Landing&, bool verified) override {
    if (verified) {
      ++count[slice.transfer];
      last[slice.transfer] = clock->now();
    }
    return verified;
  }
};

// The producer (rails p0, p1 at `rate` each way) and consumers 1..3 with two rails each, at twice
// that: the producer's ports are the bottleneck, shared by the sprayers to its children.
struct ProducerAndConsumers {
  static constexpr double kRate = 1e9;
  static constexpr uint32_t kSlice = 1 << 20;
  SimNetwork net;
  std::shared_ptr<SimTransport> transport = std::make_shared<SimTransport>(&net);
  TimingSink sinks[4];
  std::unique_ptr<Listener> listeners[4];
  std::map<uint32_t, PeerEndpoints> directory;
  std::unique_ptr<Relay> relay;

  ProducerAndConsumers() {
    net.set_latency(microseconds(5));
    for (const char* host : {"p0", "p1"}) net.set_port_rates(host, kRate, kRate);
    for (uint32_t id = 1; id <= 3; ++id) {
      std::vector<Endpoint> rails;
      for (int r = 0; r < 2; ++r) {
        const std::string host = fmt::format("c{}r{}", id, r);
        net.set_port_rates(host, 2 * kRate, 2 * kRate);
        rails.push_back(Endpoint{host, 0});
      }
      sinks[id].clock = &net.clock();
      listeners[id] = transport->listen(rails, &sinks[id], {}).value();
      directory[id] = listeners[id]->endpoints();
    }
    RelayOptions options;
    options.transport = transport;
    options.local_rails = {{"p0", 0}, {"p1", 0}};
    options.spray.clock = &net.clock();
    options.spray.scheduler_thread = false;
    relay = std::make_unique<Relay>(options);
  }

  void poll() {
    const TimePoint next = relay->poll();
    if (next != TimePoint::max()) net.loop().at(next, [this] { poll(); });
  }

  // Opens a transfer of `bytes` in two stripes to `children` (the producer holds every slice).
  void open(uint64_t transfer, uint64_t bytes, const std::vector<uint32_t>& children) {
    static const uint8_t nothing = 0;  // the simulation never reads the bytes
    const TransferShape shape{transfer, bytes, kSlice};
    checksums.assign(shape.slices(), 0);
    relay->begin(shape, &nothing, 2, &checksums);
    StripeChildren per_stripe;
    for (uint32_t child : children) per_stripe.push_back({child});
    ASSERT_TRUE(relay->set_children(per_stripe, directory, {}).ok());
    poll();
  }

  // Runs the open transfer to its end; returns its seconds from `start`.
  double finish(uint64_t transfer, uint64_t bytes, const std::vector<uint32_t>& children, TimePoint start) {
    const uint32_t per_stripe = TransferShape{transfer, bytes, kSlice}.slices() / 2;
    const auto all_in = [&] {
      for (uint32_t id : children) {
        if (sinks[id].count[transfer] < per_stripe) return false;
      }
      return true;
    };
    net.loop().run(all_in, start + std::chrono::seconds(60));
    double end = 0;
    for (uint32_t id : children) {
      EXPECT_EQ(sinks[id].count[transfer], per_stripe) << "consumer " << id << " of transfer " << transfer;
      end = std::max(end, secs(sinks[id].last[transfer]));
    }
    relay->end();
    net.loop().run([] { return false; });  // what is left queued (polls) runs as nothing
    return end - secs(start);
  }

  double send(uint64_t transfer, uint64_t bytes, const std::vector<uint32_t>& children) {
    const TimePoint start = net.loop().now();
    open(transfer, bytes, children);
    return finish(transfer, bytes, children, start);
  }

  std::vector<uint64_t> checksums;
};

// Consumer 2 died; consumer 3 takes its stripe. Its sprayer is new, but it sends over the same
// NICs as the sprayer to consumer 1, which measured them: it starts with the window of that rate
// (queue_target's worth), not in slow start (two slices per rail). In slow start its slices wait
// in the NICs' queues behind those of the measured sprayer, its first sample measures that wait,
// and its stripe trails: in a cluster whose receivers take exactly what arrives, the consumers
// behind a new head then finish late (one new head cost a 2.8 GB version to 64 simulated
// consumers 17%).
TEST(RelayOverSim, ANewChildStartsAtTheRateItsSiblingsMeasuredOverTheSameNics) {
  ProducerAndConsumers cluster;
  const uint64_t bytes = 512ull << 20;
  const double line = static_cast<double>(bytes) / (2 * ProducerAndConsumers::kRate);
  EXPECT_LT(cluster.send(1, bytes, {1, 2}), 1.05 * line);
  const auto inflight = [&](uint32_t id) {
    std::vector<uint64_t> bytes_per_rail;
    for (const auto& rail : cluster.relay->telemetry(id)) bytes_per_rail.push_back(rail.inflight_bytes);
    return bytes_per_rail;
  };
  const TimePoint start = cluster.net.loop().now();
  cluster.open(2, bytes, {1, 3});
  const auto to_new = inflight(3);
  const auto to_measured = inflight(1);
  ASSERT_EQ(to_new.size(), 2u);
  ASSERT_EQ(to_measured.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(to_new[r], 2u * ProducerAndConsumers::kSlice) << "rail " << r << " to the new child is in slow start";
    EXPECT_GE(to_new[r], to_measured[r] / 2) << "rail " << r;
  }
  EXPECT_LT(cluster.finish(2, bytes, {1, 3}, start), 1.05 * line);
  for (const auto& rail : cluster.relay->telemetry(3)) EXPECT_GT(rail.bandwidth_bps, 0) << rail.name << " measured";
}

// A standby link's sprayer carries nothing (watch); when its peer becomes a child it starts as a
// new child's does, at the rate the siblings measured (not in slow start, two slices a rail).
// Once no longer watched, its sprayer stays while the peer is a child, and goes after.
TEST(RelayOverSim, AWatchedMemberThatBecomesAChildStartsAsANewChildDoesAndGoesWhenUnwatched) {
  ProducerAndConsumers cluster;
  const uint64_t bytes = 512ull << 20;
  const double line = static_cast<double>(bytes) / (2 * ProducerAndConsumers::kRate);
  ASSERT_TRUE(cluster.relay->watch({{3, cluster.directory[3]}}).ok());
  EXPECT_LT(cluster.send(1, bytes, {1, 2}), 1.05 * line);
  const TimePoint start = cluster.net.loop().now();
  cluster.open(2, bytes, {1, 3});
  const auto to_new = cluster.relay->telemetry(3);
  const auto to_measured = cluster.relay->telemetry(1);
  ASSERT_EQ(to_new.size(), 2u);
  ASSERT_EQ(to_measured.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(to_new[r].inflight_bytes, 2u * ProducerAndConsumers::kSlice) << "rail " << r << " to the child is in slow start";
    EXPECT_GE(to_new[r].inflight_bytes, to_measured[r].inflight_bytes / 2) << "rail " << r;
  }
  ASSERT_TRUE(cluster.relay->watch({}).ok());
  EXPECT_EQ(cluster.relay->telemetry(3).size(), 2u) << "a child's sprayer went with its standby link";
  EXPECT_LT(cluster.finish(2, bytes, {1, 3}, start), 1.05 * line);
  ASSERT_TRUE(cluster.relay->watch({{2, cluster.directory[2]}}).ok());
  EXPECT_TRUE(cluster.relay->watched().count(2));
  ASSERT_TRUE(cluster.relay->watch({}).ok());
  EXPECT_TRUE(cluster.relay->telemetry(2).empty()) << "the sprayer of a link no longer watched stays";
  EXPECT_TRUE(cluster.relay->watched().empty());
}

// A relay stages before its children have the version; how the links to them did is reported
// whole once they have it (control::Forwarded). finished_links() gives the children of a
// transfer that have every slice they get from here, while it is forwarded and after it ended,
// and nothing of a child its end cut off, or of another transfer.
TEST(RelayOverSim, FinishedLinksAreTheChildrenThatHaveEverySliceTheyGetFromHere) {
  ProducerAndConsumers cluster;
  const uint64_t bytes = 64ull << 20;
  for (int r = 0; r < 2; ++r) cluster.net.set_port_up(fmt::format("c2r{}", r), false);  // 2 never gets it
  cluster.open(1, bytes, {1, 2});
  const uint32_t per_stripe = TransferShape{1, bytes, ProducerAndConsumers::kSlice}.slices() / 2;
  EXPECT_TRUE(cluster.relay->finished_links(1).empty()) << "nothing delivered yet";
  cluster.net.loop().run([&] { return cluster.sinks[1].count[1] == per_stripe; },
                         cluster.net.loop().now() + std::chrono::seconds(60));
  ASSERT_EQ(cluster.sinks[1].count[1], per_stripe);
  cluster.net.loop().run([] { return false; }, cluster.net.loop().now() + std::chrono::milliseconds(1));  // its acks
  auto links = cluster.relay->finished_links(1);
  ASSERT_EQ(links.size(), 1u) << "consumer 2 still owes its stripe";
  ASSERT_TRUE(links.count(1));
  EXPECT_EQ(links[1].slices, per_stripe) << "the whole link";
  EXPECT_TRUE(cluster.relay->finished_links(2).empty()) << "another transfer";
  cluster.relay->end();
  links = cluster.relay->finished_links(1);
  EXPECT_EQ(links.size(), 1u) << "kept after the end; consumer 2, cut off by it, is not there";
  EXPECT_TRUE(links.count(1));
  cluster.net.loop().run([] { return false; });
  for (int r = 0; r < 2; ++r) cluster.net.set_port_up(fmt::format("c2r{}", r), true);
  cluster.open(2, bytes, {1, 2});
  EXPECT_TRUE(cluster.relay->finished_links(1).empty()) << "a new transfer began";
  cluster.relay->end();
  cluster.net.loop().run([] { return false; });
}

// Mid-transfer, consumer 2's ports go down and consumer 1's slow to a crawl (a 1 MiB slice a
// second). 2 is heard on no rail: reported RelayOptions::unheard_after (300 ms) after its last
// heartbeat, where waiting out its slices' allowance took 500 ms and more, and named early
// (unheard_children, a suspicion a round acts on where the standby links agree) after
// watch_unheard_after (150 ms). 1 acknowledges nothing for seconds but is heard: only slow, it is
// neither.
TEST(RelayOverSim, AChildHeardOnNoRailIsReportedSoonAndASlowOneThatIsHeardIsNot) {
  ProducerAndConsumers cluster;
  const uint64_t bytes = 4ull << 30;
  const TimePoint start = cluster.net.loop().now();
  cluster.open(1, bytes, {1, 2});
  const TimePoint cut = start + std::chrono::milliseconds(100);
  cluster.net.loop().at(cut, [&] {
    for (int r = 0; r < 2; ++r) {
      cluster.net.set_port_up(fmt::format("c2r{}", r), false);
      cluster.net.set_port_rates(fmt::format("c1r{}", r), 1 << 20, 1 << 20);
    }
  });
  std::map<uint32_t, TimePoint> reported, suspected;
  const TimePoint until = cut + std::chrono::seconds(3);
  std::function<void()> watch = [&] {
    for (uint32_t id : cluster.relay->unreachable_children()) reported.try_emplace(id, cluster.net.loop().now());
    for (uint32_t id : cluster.relay->unheard_children()) suspected.try_emplace(id, cluster.net.loop().now());
    if (cluster.net.loop().now() < until) cluster.net.loop().after(std::chrono::milliseconds(1), watch);
  };
  cluster.net.loop().after(std::chrono::milliseconds(1), watch);
  cluster.net.loop().run([] { return false; }, until);
  ASSERT_TRUE(reported.count(2)) << "the child cut off was not reported";
  const double after = secs(reported[2]) - secs(cut);
  EXPECT_GE(after, 0.3);
  EXPECT_LT(after, 0.32) << "reported " << after << " s after the cut";
  EXPECT_FALSE(reported.count(1)) << "the slow child, still heard, was reported";
  ASSERT_TRUE(suspected.count(2)) << "the child cut off was not named early";
  const double early = secs(suspected[2]) - secs(cut);
  EXPECT_GE(early, 0.15);
  EXPECT_LT(early, 0.17) << "named " << early << " s after the cut";
  EXPECT_FALSE(suspected.count(1)) << "the slow child, still heard, was named early";
  const uint32_t per_stripe = TransferShape{1, bytes, ProducerAndConsumers::kSlice}.slices() / 2;
  EXPECT_LT(cluster.sinks[1].count[1], per_stripe) << "the slow child had its stripe: nothing was owed";
  cluster.relay->end();
  cluster.net.loop().run([] { return false; });
}

// Standby links: a relay watches members it forwards nothing to. One cut off on every rail is
// unheard once silent for watch_unheard_after (150 ms), one cut on one rail of two is not, and one
// mended is heard again; a watched member that becomes a child takes its transfer over the same
// sprayer.
TEST(RelayOverSim, AWatchedMemberHeardOnNoRailIsUnheardAndOneHeardOnAnyIsNot) {
  ProducerAndConsumers cluster;
  ASSERT_TRUE(cluster.relay->watch({{2, cluster.directory[2]}, {3, cluster.directory[3]}}).ok());
  const TimePoint start = cluster.net.loop().now();
  const TimePoint cut = start + std::chrono::milliseconds(100);
  const TimePoint mended = cut + std::chrono::milliseconds(500);
  cluster.net.loop().at(cut, [&] {
    for (int r = 0; r < 2; ++r) cluster.net.set_port_up(fmt::format("c2r{}", r), false);
    cluster.net.set_port_up("c3r0", false);
  });
  cluster.net.loop().at(mended, [&] {
    for (int r = 0; r < 2; ++r) cluster.net.set_port_up(fmt::format("c2r{}", r), true);
  });
  std::vector<std::pair<double, std::vector<uint32_t>>> seen;  // seconds after the cut, unheard
  std::function<void()> look = [&] {
    seen.emplace_back(secs(cluster.net.loop().now()) - secs(cut), cluster.relay->unheard_watched());
    if (cluster.net.loop().now() < mended + std::chrono::milliseconds(100)) {
      cluster.net.loop().after(std::chrono::milliseconds(1), look);
    }
  };
  cluster.net.loop().after(std::chrono::milliseconds(1), look);
  cluster.net.loop().run([] { return false; });
  ASSERT_FALSE(seen.empty());
  double first_unheard = -1;
  for (const auto& [after, unheard] : seen) {
    if (after < 0.149) {
      EXPECT_TRUE(unheard.empty()) << after << " s after the cut";
    }
    if (!unheard.empty() && first_unheard < 0) first_unheard = after;
    if (after > 0.16 && after < 0.5) {
      EXPECT_EQ(unheard, std::vector<uint32_t>{2}) << after << " s after the cut";
    }
  }
  EXPECT_GE(first_unheard, 0.149) << "unheard before watch_unheard_after";
  EXPECT_LT(first_unheard, 0.16) << "unheard " << first_unheard << " s after the cut";
  EXPECT_TRUE(seen.back().second.empty()) << "member 2 is not heard again once its ports are up";
  // Member 3, watched and still heard on its other rail, takes a transfer.
  EXPECT_GT(cluster.send(1, 64 << 20, {3}), 0);
}

}  // namespace
}  // namespace deltacast::sim
