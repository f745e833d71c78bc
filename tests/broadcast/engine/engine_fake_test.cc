// The whole engine in one process over the fake backend: a producer and
// consumers (relaying to each other down the chains) on two rails each, every
// address a port with a modelled rate (fake/wire.h), the control plane on
// loopback. Faults are injected mid-version: a rail that fails, one that
// stalls, one that corrupts, a relay that dies, and a consumer whose ports are
// throttled. Rates are modelled, not measured off the machine, so the outcome
// does not depend on how many cores run the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <fmt/ranges.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/engine/control/control_messages.h"
#include "broadcast/engine/metrics/engine_metrics.h"
#include "broadcast/testing/fake/transport.h"
#include "broadcast/testing/faulty_transport.h"
#include "broadcast/transport/handshake.h"
#include "broadcast/transport/socket.h"
#include "core/byte_io.h"
#include "sparse/trace/model_layout.h"
#include "support/engine_harness.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
using testing::expect_all_exact;
constexpr int kRails = 2;
constexpr uint16_t kDataPort = 7000;
constexpr double kPortRate = 50e6;  // bytes/s per rail and port, each way

// Node n's address on rail r (the producer is node 1, consumer i node i + 2).
std::string host(int node, int rail) { return fmt::format("10.{}.0.{}", rail, node); }

struct FakeCluster {
  fake::FakeNetwork network;
  std::shared_ptr<FaultyTransport> transport =
      std::make_shared<FaultyTransport>(std::make_shared<fake::FakeTransport>(&network));
  std::unique_ptr<testing::Trainer> trainer;
  std::vector<std::unique_ptr<testing::Rollout>> rollouts;

  // `sites`: consumer i's site (none given, or "": the producer's).
  FakeCluster(uint64_t elements, int consumers, milliseconds stall_timeout = milliseconds(5000), uint32_t fanout = 0,
              const std::vector<std::string>& sites = {}) {
    ProducerOptions options;
    options.round.fanout = fanout;
    options.transport_backend = transport;
    for (int r = 0; r < kRails; ++r) options.rails.push_back({host(1, r), 0});
    options.round.stall_timeout = stall_timeout;
    options.spray.min_deadline = milliseconds(40);
    set_ports(1, kPortRate);
    trainer = std::make_unique<testing::Trainer>(elements, 3e-7, options);
    for (int i = 0; i < consumers; ++i) {
      set_ports(i + 2, kPortRate);
      ConsumerOptions c;
      c.transport_backend = transport;
      for (int r = 0; r < kRails; ++r) c.rails.push_back(rail(i, r));
      c.name = fmt::format("c{}", i);
      c.node = fmt::format("node{}", i + 2);  // each its own host (its own ports above), as a tree fans out over
      if (static_cast<size_t>(i) < sites.size()) c.site = sites[static_cast<size_t>(i)];
      c.spray = options.spray;
      rollouts.push_back(std::make_unique<testing::Rollout>(manifest(), trainer->producer->address(), c));
      EXPECT_TRUE(rollouts.back()->consumer->start(testing::kEngineWait).ok());
    }
    EXPECT_TRUE(producer().wait_members(static_cast<size_t>(consumers), testing::kEngineWait).ok());
  }

  Producer& producer() { return *trainer->producer; }
  const Manifest& manifest() const { return trainer->trace->manifest(); }
  static Endpoint rail(int consumer, int r) { return {host(consumer + 2, r), kDataPort}; }
  void set_ports(int node, double rate, bool up = true) {
    for (int r = 0; r < kRails; ++r) network.set_port(host(node, r), fake::PortModel{rate, up});
  }
  // Bytes the network carried from node `from` into node `to`, over every rail.
  uint64_t carried(int from, int to) const {
    uint64_t bytes = 0;
    for (int r = 0; r < kRails; ++r) bytes += network.carried(host(from, r), host(to, r));
    return bytes;
  }

  // A step of training and a version (or the same tensors again, in full); waits for every member.
  VersionReport publish(bool step, bool full) {
    if (step) trainer->trace->step();
    auto v = producer().publish(full);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_TRUE(producer().wait(*v, testing::kEngineWait).ok());
    for (const MemberRecord& m : producer().stats().members) settled_transfer = std::max(settled_transfer, m.transfer);
    return producer().report(*v).value_or(VersionReport{});
  }
  // Waits until some consumer holds part of the version in flight. Progress reported for the
  // transfer publish() last waited for does not count: the new round may not have begun yet.
  void wait_mid_version() {
    for (int i = 0; i < 5000; ++i) {
      const auto members = producer().stats().members;
      if (std::any_of(members.begin(), members.end(), [&](const MemberRecord& m) {
            return m.transfer > settled_transfer && m.arrived > 4;
          })) {
        return;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    ADD_FAILURE() << "the version never got under way";
  }
  void expect_exact(const std::vector<int>& which) {
    for (int i : which) EXPECT_TRUE(rollouts[i]->matches(*trainer->trace)) << "consumer c" << i;
    expect_all_exact(producer(), producer().stats().version, which.size());
  }
  std::vector<int> all() const {
    std::vector<int> out(rollouts.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>(i);
    return out;
  }

  uint64_t settled_transfer = 0;  // the newest transfer publish() saw finish
};

TEST(FakeEngine, VersionsAreExactEverywhere) {
  FakeCluster cluster(1 << 20, 4);
  EXPECT_EQ(cluster.producer().transport(), "fake");
  for (int step = 0; step < 5; ++step) {
    const VersionReport report = cluster.publish(true, step == 3);
    EXPECT_EQ(report.committed, 4u);
    EXPECT_EQ(report.full, step == 0 || step == 3);
    cluster.expect_exact(cluster.all());
  }
}

// Every shape the planner builds, fixed, and the model's own choice: exact everywhere.
TEST(FakeEngine, EveryShapeDeliversExactVersions) {
  for (uint32_t fanout : {1u, 2u, 4u, 0u}) {
    SCOPED_TRACE(fmt::format("fan-out {}", fanout));
    FakeCluster cluster(1 << 20, 6, milliseconds(5000), fanout);
    for (int step = 0; step < 3; ++step) {
      const VersionReport report = cluster.publish(true, step == 2);
      EXPECT_EQ(report.committed, 6u);
      if (fanout != 0) {
        EXPECT_EQ(report.fanout, fanout);
      }
      EXPECT_GE(report.fanout, 1u);
      cluster.expect_exact(cluster.all());
    }
  }
}

// Sites: each version crosses into each site once. The bytes the network carried into a site's
// hosts from hosts outside it are one copy of the version, in chains and in trees; the same
// consumers with no sites named take it into a site several times (rotated chains and trees cross
// between them wherever the rotation puts a boundary), which this test would see.
TEST(FakeEngine, EachVersionCrossesIntoEachSiteOnce) {
  const std::vector<std::string> sites = {"", "", "east", "east", "east", "west", "west"};
  for (uint32_t fanout : {1u, 2u}) {
    for (bool named : {true, false}) {
      SCOPED_TRACE(fmt::format("fan-out {}, sites {}", fanout, named ? "named" : "not named"));
      FakeCluster cluster(1 << 20, 7, milliseconds(5000), fanout, named ? sites : std::vector<std::string>{});
      // Bytes into each remote site from every host outside it (the producer's included).
      const auto into = [&](const std::string& site) {
        uint64_t bytes = 0;
        for (int to = 0; to < 7; ++to) {
          if (sites[to] != site) continue;
          for (int from = -1; from < 7; ++from) {
            if (from >= 0 && sites[from] == site) continue;
            bytes += cluster.carried(from + 2, to + 2);
          }
        }
        return bytes;
      };
      double most = 0;  // the most copies of a version any remote site took
      for (int step = 0; step < 3; ++step) {
        const uint64_t east = into("east"), west = into("west");
        const VersionReport report = cluster.publish(true, step == 2);
        EXPECT_EQ(report.committed, 7u);
        cluster.expect_exact(cluster.all());
        const double wire = static_cast<double>(report.stats.wire_bytes);
        for (const double copies : {(into("east") - east) / wire, (into("west") - west) / wire}) {
          if (named) {
            EXPECT_GE(copies, 1.0) << "version " << report.version;
            EXPECT_LE(copies, 1.02) << "version " << report.version << " crossed into a site more than once";
          }
          most = std::max(most, copies);
        }
      }
      if (!named) {
        EXPECT_GT(most, 1.15) << "with no sites named, some site took a version more than once";
      }
    }
  }
}

// A relay stages a version as soon as it holds it, before its children across a slow WAN have
// much of it: its whole report of those links comes once they have it all (control::Forwarded),
// and the rate book knows the WAN into their site from it (a relay's new child there starts from
// that). Staged alone, the book never knew it: relays' links across sites were cut off where the
// relay had the version.
TEST(FakeEngine, ARelaysLinksIntoAnotherSiteReachTheRateBookAfterItStaged) {
  // Trees 2 wide: the producer feeds its site's two members, which take the version into west.
  const std::vector<std::string> sites = {"", "", "west", "west"};
  FakeCluster cluster(1 << 22, 4, milliseconds(60000), 2, sites);
  for (int node : {4, 5}) cluster.set_ports(node, 8e6);  // west's hosts: a slow way in
  const VersionReport report = cluster.publish(false, false);
  ASSERT_EQ(report.committed, 4u);
  cluster.expect_exact(cluster.all());
  std::map<std::string, PathEstimate> wan;
  for (int i = 0; i < 200 && !wan.count("west"); ++i) {
    std::this_thread::sleep_for(milliseconds(10));  // the relays tell within their next tick
    wan = cluster.producer().stats().wan_into;
  }
  ASSERT_TRUE(wan.count("west")) << "no link into west measured";
  // The WAN's rate, not the LAN's (above it) or none: the fake links are paced on the same two
  // cores as everything else, so a loaded run measures less (0.48x of it seen in one CI run).
  EXPECT_GT(wan["west"].bytes_per_second, 0.25 * 2 * kRails * 8e6) << "west's two hosts, two rails of 8 MB/s each";
  EXPECT_LT(wan["west"].bytes_per_second, 1.5 * 2 * kRails * 8e6);
  EXPECT_GT(wan["west"].round_trip, 0);
}

// A site's WAN link fails mid-version (every path between its hosts and the rest is cut, its own
// network works; control stays up, as on a separate management network): its members, unreachable
// from their parents, go on from another site, and every version is exact everywhere.
// West takes the version from `feeder` (node numbers: the producer 1, consumer i i + 2): in trees
// the producer's site, in chains east (the site before it). That link fails; `detour` is the
// site west must take the rest from.
void a_site_whose_link_fails_takes_the_version_from_another(uint32_t fanout, std::vector<int> feeder,
                                                            std::vector<int> detour) {
  SCOPED_TRACE(fmt::format("fan-out {}", fanout));
  const std::vector<std::string> sites = {"", "", "east", "east", "west", "west"};
  const std::vector<int> west = {6, 7};
  FakeCluster cluster(1 << 22, 6, milliseconds(60000), fanout, sites);
  cluster.publish(false, false);
  for (int node = 1; node <= 7; ++node) cluster.set_ports(node, 8e6);  // the full version takes over a second
  const auto into_west_from = [&](const std::vector<int>& nodes) {
    uint64_t bytes = 0;
    for (int to : west) {
      for (int from : nodes) bytes += cluster.carried(from, to);
    }
    return bytes;
  };
  const uint64_t detour_before = into_west_from(detour);
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  for (int w : west) {
    for (int other : feeder) {
      for (int r = 0; r < kRails; ++r) cluster.network.set_path_up(host(w, r), host(other, r), false);
    }
  }
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok());
  const VersionReport report = *cluster.producer().report(*v);
  EXPECT_EQ(report.committed, 6u);
  EXPECT_GE(report.replans, 1u);
  cluster.expect_exact(cluster.all());
  EXPECT_GT(into_west_from(detour), detour_before) << "west took the version from the other site";
  // The next version goes out with the link still cut: west again from another site.
  const VersionReport next = cluster.publish(true, false);
  EXPECT_EQ(next.committed, 6u);
  EXPECT_EQ(next.replans, 0u) << "the next version was planned through the link found broken";
  cluster.expect_exact(cluster.all());
}

TEST(FakeEngine, ASiteWhoseLinkFailsTakesTheVersionFromAnotherInChains) {
  a_site_whose_link_fails_takes_the_version_from_another(1, {4, 5}, {1, 2, 3});
}
TEST(FakeEngine, ASiteWhoseLinkFailsTakesTheVersionFromAnotherInTrees) {
  a_site_whose_link_fails_takes_the_version_from_another(2, {1, 2, 3}, {4, 5});
}

// Two of a site's links fail at once: the sentinels' standby links (standby_links.h) find both
// cut, north's to west among them, so west is moved once, below east, the one site that still
// reaches it. (Without them it went below north first, whose parent could not reach it either,
// and moved again after that report: two re-plans.)
TEST(FakeEngine, ASiteCutOffFromTwoSitesTakesTheVersionFromAThird) {
  const std::vector<std::string> sites = {"", "", "east", "east", "north", "north", "west", "west"};
  FakeCluster cluster(1 << 22, 8, milliseconds(60000), 2, sites);
  cluster.publish(false, false);
  for (int node = 1; node <= 9; ++node) cluster.set_ports(node, 8e6);  // the full version takes over a second
  const auto into_west_from_east = [&] {
    uint64_t bytes = 0;
    for (int to : {8, 9}) {
      for (int from : {4, 5}) bytes += cluster.carried(from, to);
    }
    return bytes;
  };
  const uint64_t before = into_west_from_east();
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  // West keeps only its link to east: cut from the producer's site (hosts 1-3) and north (6, 7).
  for (int w : {8, 9}) {
    for (int other : {1, 2, 3, 6, 7}) {
      for (int r = 0; r < kRails; ++r) cluster.network.set_path_up(host(w, r), host(other, r), false);
    }
  }
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok()) << "the round stalled";
  const VersionReport report = *cluster.producer().report(*v);
  EXPECT_EQ(report.committed, 8u);
  // West moves on the standby links' word, before its parent's full report, and goes on to east
  // at once if the first detour took it below north before north's sentinel reported.
  EXPECT_GE(report.replans, 1u);
  EXPECT_LE(report.replans, 2u);
  EXPECT_EQ(report.standby_replans, report.replans) << "a move waited for a parent's full report";
  cluster.expect_exact(cluster.all());
  EXPECT_GT(into_west_from_east(), before) << "west took the version from east";
  // The sentinels (the producer its own site's, 0; then each site's member of lowest id: 3, 5 and
  // 7) say what they hear: west from east only.
  std::map<uint32_t, std::map<std::string, double>> heard;  // by sentinel, by peer
  const auto read = [&](uint32_t sentinel, const MetricsSink& sink) {
    const auto family = sink.families().find("deltacast_standby_link_heard");
    if (family == sink.families().end()) return;
    for (const auto& sample : family->second.samples) heard[sentinel][sample.labels.at(0).second] = sample.value;
  };
  MetricsSink producer_sink;
  collect_producer_metrics(producer_sink, cluster.producer());
  read(0, producer_sink);
  for (const auto& rollout : cluster.rollouts) {
    MetricsSink sink;
    collect_consumer_metrics(sink, *rollout->consumer);
    read(rollout->consumer->state().id, sink);
  }
  using Heard = std::map<std::string, double>;
  EXPECT_EQ(heard, (std::map<uint32_t, Heard>{
                       {0, Heard{{"3", 1}, {"5", 1}, {"7", 0}}}, {3, Heard{{"5", 1}, {"7", 1}}}, {5, Heard{{"7", 0}}}}));
}

TEST(FakeEngine, AShapeThePlannerDoesNotBuildIsRefusedNamingIt) {
  fake::FakeNetwork network;
  ProducerOptions options;
  options.transport_backend = std::make_shared<fake::FakeTransport>(&network);
  options.rails = {{host(1, 0), 0}};
  options.round.fanout = 3;
  auto trainer_trace = RlTrace::create(transformer_layout(1 << 12, DType::kBF16), TraceOptions{});
  ASSERT_TRUE(trainer_trace.ok());
  const auto published = (*trainer_trace)->published();
  auto refused = Producer::create((*trainer_trace)->manifest(),
                                  std::vector<TensorView>(published.begin(), published.end()), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("round.fanout"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("trees:3"), std::string::npos) << refused.status().to_string();
}

TEST(FakeEngine, AConsumerOnAnotherTransportIsRefusedNamingBoth) {
  FakeCluster cluster(1 << 16, 1);
  ConsumerOptions options;
  options.transport = "tcp";
  options.rails = {{"127.0.0.1", 0}};
  options.name = "odd";
  testing::Rollout odd(cluster.manifest(), cluster.producer().address(), options);
  const Status s = odd.consumer->start(testing::kEngineWait);
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
  EXPECT_NE(s.message().find("'tcp'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'fake'"), std::string::npos) << s.message();
  EXPECT_TRUE(odd.consumer->state().refused);
  EXPECT_EQ(cluster.producer().stats().members.size(), 1u) << "the group is as it was";
  EXPECT_EQ(cluster.publish(true, false).committed, 1u);
}

// A control connection to the producer, spoken by hand after a proper handshake.
struct RawMember {
  int fd = -1;
  net::Session session;
  explicit RawMember(const Endpoint& producer) {
    fd = net::open_socket("").value();
    EXPECT_TRUE(net::connect_socket(fd, {"127.0.0.1", 0}, producer, milliseconds(2000)).ok());
    auto shaken = net::shake_hands(fd, trust::Role::kClient, testing::engine_trust(), trust::Purpose::kControl,
                                   ControlClock::now() + milliseconds(5000));
    EXPECT_TRUE(shaken.ok()) << shaken.status().to_string();
    if (shaken.ok()) session = std::move(shaken).value();
  }
  ~RawMember() { ::close(fd); }
  void send(const std::string& text) {
    EXPECT_TRUE(write_control_frame(fd, text, *session.seals.outgoing, ControlClock::now() + milliseconds(2000)).ok());
  }
  Result<std::string> read(milliseconds wait) {
    return read_control_frame(fd, *session.seals.incoming, ControlClock::now() + wait, wait);
  }
  // Reads messages until the producer closes the connection; false if it stays open for 5 s.
  bool dropped() {
    const auto until = ControlClock::now() + milliseconds(5000);
    while (ControlClock::now() < until) {
      auto frame = read(milliseconds(200));
      if (!frame.ok() && frame.status().code() != StatusCode::kDeadlineExceeded) return true;
    }
    return false;
  }
};

TEST(FakeEngine, APeerThatBreaksTheControlProtocolIsDroppedAlone) {
  FakeCluster cluster(1 << 18, 2);
  const Endpoint address = cluster.producer().address();
  // Garbage where a join belongs: dropped before it is a member.
  RawMember garbage(address);
  garbage.send("{\"type\": \"join\", \"protocol\": \"not a number\"}");
  EXPECT_TRUE(garbage.dropped());
  // A proper join, then a message with a field the protocol does not have.
  RawMember member(address);
  control::Join join;
  join.name = "rogue";
  join.transport = "fake";
  join.manifest_hash = cluster.manifest().hash();
  join.manifest = cluster.manifest().tensors();
  join.rails = {{"10.0.9.9", kDataPort}};
  member.send(control::encode_text(join));
  auto welcome = member.read(milliseconds(5000));
  ASSERT_TRUE(welcome.ok()) << welcome.status().to_string();
  ASSERT_TRUE(std::holds_alternative<control::Welcome>(control::decode_text(*welcome).value()));
  ASSERT_TRUE(cluster.producer().wait_members(3, testing::kEngineWait).ok());
  Json staged = control::encode(control::Staged{1, 0.1, 0.1, {}});
  staged["surprise"] = 1;
  member.send(staged.dump());
  EXPECT_TRUE(member.dropped());
  for (int i = 0; i < 500 && cluster.producer().stats().members.size() != 2; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(cluster.producer().stats().members.size(), 2u);
  // The others never noticed.
  for (int step = 0; step < 2; ++step) EXPECT_EQ(cluster.publish(true, false).committed, 2u);
  cluster.expect_exact(cluster.all());
}

TEST(FakeEngine, ControlPeersMustProveTheSecretAndEveryFrameMustOpen) {
  FakeCluster cluster(1 << 16, 1);
  const Endpoint address = cluster.producer().address();
  const auto connect = [&] {
    const int fd = net::open_socket("").value();
    EXPECT_TRUE(net::connect_socket(fd, {"127.0.0.1", 0}, address, milliseconds(2000)).ok());
    return fd;
  };
  const auto shake = [&](int fd, trust::Trust t) {
    return net::shake_hands(fd, trust::Role::kClient, t, trust::Purpose::kControl,
                            ControlClock::now() + milliseconds(5000));
  };
  const auto closed_by_peer = [](int fd) {
    char byte;
    for (int i = 0; i < 50; ++i) {
      const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return false;
  };
  {  // The wrong secret: refused in the handshake, naming it.
    const int fd = connect();
    auto s = shake(fd, testing::engine_trust(testing::kEngineToken + 1));
    EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(s.status().message().find("wrong secret"), std::string::npos) << s.status().to_string();
    ::close(fd);
  }
  {  // Less protection than the producer requires: refused naming the modes.
    const int fd = connect();
    trust::Trust weak = testing::engine_trust();
    weak.protection = trust::Protection::kInsecure;
    auto s = shake(fd, weak);
    EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(s.status().message().find("the peer offers authenticated; this side requires insecure"),
              std::string::npos)
        << s.status().to_string();
    ::close(fd);
  }
  {  // A peer without authentication (a join frame straight away, as before): dropped.
    const int fd = connect();
    control::Join join;
    join.name = "old";
    const std::string text = control::encode_text(join);
    uint8_t header[8];
    store_le<uint32_t>(header, kControlMagic);
    store_le<uint32_t>(header + 4, static_cast<uint32_t>(text.size()));
    EXPECT_TRUE(net::write_full(fd, header, 8, text.data(), text.size(), ControlClock::now() + milliseconds(2000)).ok());
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  {  // A frame altered in flight after a proper handshake: dropped, nothing of it parsed.
    const int fd = connect();
    auto session = shake(fd, testing::engine_trust());
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    control::Join join;
    join.name = "altered";
    join.transport = "fake";
    join.manifest_hash = cluster.manifest().hash();
    join.manifest = cluster.manifest().tensors();
    join.rails = {{"10.0.9.9", kDataPort}};
    std::string text = control::encode_text(join);
    std::vector<uint8_t> frame(8 + text.size() + trust::kTagBytes);
    store_le<uint32_t>(frame.data(), kControlMagic);
    store_le<uint32_t>(frame.data() + 4, static_cast<uint32_t>(text.size()));
    std::copy(text.begin(), text.end(), frame.begin() + 8);
    session->seals.outgoing->seal(frame.data(), 8, frame.data() + 8, text.size(), frame.data() + 8 + text.size());
    frame[8 + text.size() / 2] ^= 0x20;  // the attacker's edit
    EXPECT_TRUE(net::write_full(fd, frame.data(), frame.size(), nullptr, 0, ControlClock::now() + milliseconds(2000)).ok());
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  EXPECT_EQ(cluster.producer().stats().members.size(), 1u) << "none of them became a member";
  EXPECT_EQ(cluster.publish(true, false).committed, 1u);
  cluster.expect_exact(cluster.all());
}

// Publishes a full version over slowed ports, lets it get under way, breaks something on the
// way to consumer `victim` before that one has the version, and requires every consumer to
// commit it exactly; then a delta with everything healthy again.
template <typename Break, typename Mend>
void survive_mid_version(FakeCluster& cluster, int victim, Break break_it, Mend mend) {
  cluster.publish(false, false);
  for (int node = 1; node <= static_cast<int>(cluster.rollouts.size()) + 1; ++node) cluster.set_ports(node, 16e6);
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  break_it();
  EXPECT_LT(cluster.rollouts[victim]->consumer->version(), *v) << "the fault came after the victim had the version";
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok());
  const VersionReport report = *cluster.producer().report(*v);
  EXPECT_EQ(report.committed, cluster.rollouts.size());
  EXPECT_EQ(report.failed + report.lost, 0u);
  cluster.expect_exact(cluster.all());
  mend();
  EXPECT_EQ(cluster.publish(true, false).committed, cluster.rollouts.size());
  cluster.expect_exact(cluster.all());
}

TEST(FakeEngine, ARailThatFailsMidVersionLosesNothing) {
  FakeCluster cluster(1 << 22, 4);
  const Endpoint victim = FakeCluster::rail(1, 0);
  uint64_t sends_at_fault = 0;
  survive_mid_version(
      cluster, 1,
      [&] {
        cluster.transport->set_plan(victim, FaultPlan{FaultPlan::kRefuse});
        sends_at_fault = cluster.transport->sends_to(victim);
      },
      [&] { cluster.transport->clear(); });
  EXPECT_GT(cluster.transport->sends_to(victim), sends_at_fault) << "the failing rail was tried and refused";
}

TEST(FakeEngine, ARailThatStallsMidVersionLosesNothing) {
  // Consumer c2's port on rail 1 goes silent, both ways: whatever is on it never arrives.
  FakeCluster cluster(1 << 22, 4);
  survive_mid_version(
      cluster, 2, [&] { cluster.network.set_port(host(4, 1), fake::PortModel{16e6, false}); },
      [&] { cluster.network.set_port(host(4, 1), fake::PortModel{kPortRate, true}); });
}

TEST(FakeEngine, ARailThatCorruptsMidVersionLosesNothing) {
  // Every slice to c3 over rail 0 arrives with a byte flipped: each fails its checksum there.
  FakeCluster cluster(1 << 22, 4);
  survive_mid_version(
      cluster, 3, [&] { cluster.transport->set_plan(FakeCluster::rail(3, 0), FaultPlan{FaultPlan::kCorrupt}); },
      [&] { cluster.transport->clear(); });
}

// In chains (fan-out 1) and in trees 2 wide (its children then take the stripe from its parent).
void a_relay_that_dies_mid_version_is_routed_around(uint32_t fanout) {
  SCOPED_TRACE(fmt::format("fan-out {}", fanout));
  FakeCluster cluster(1 << 22, 5, milliseconds(5000), fanout);
  cluster.publish(false, false);
  // Bytes into consumer i's hosts from every host: a survivor is sent what it misses, not its
  // stripes again from the start.
  const auto into = [&](int i) {
    uint64_t bytes = 0;
    for (int from = 1; from <= 6; ++from) bytes += cluster.carried(from, i + 2);
    return bytes;
  };
  std::vector<uint64_t> before;
  for (int i = 0; i < 5; ++i) before.push_back(into(i));
  // Slow ports: the full version takes over a second, so the relay dies early in it.
  for (int node = 1; node <= 6; ++node) cluster.set_ports(node, 8e6);
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  // It freezes (ports down: nothing more in or out), then dies. Every stripe holds it somewhere,
  // so some of the others miss what it had still to forward.
  cluster.set_ports(4, 8e6, false);
  EXPECT_LT(cluster.rollouts[2]->consumer->version(), *v) << "it died after the version was done";
  cluster.rollouts[2]->consumer->close();
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok());
  const VersionReport report = *cluster.producer().report(*v);
  EXPECT_EQ(report.fanout, fanout);
  EXPECT_EQ(report.committed, 4u);
  EXPECT_EQ(report.lost, 1u);
  EXPECT_EQ(report.why_not, (std::map<std::string, std::string>{{"c2", "left the group during the round"}}));
  EXPECT_GE(report.replans, 1u);
  cluster.expect_exact({0, 1, 3, 4});
  // What a new parent sends a child is what the child misses, less what it reported holding (up
  // to a progress interval old); a parent that feeds it more stripes than before extends its open
  // transfer, keeping what is in flight and what it acknowledged there. What came from elsewhere
  // since its last report may go twice. Here: every survivor 1.00-1.07 copies (c3, below the dead
  // relay in chains, took 1.12-1.20 while the parent opened its transfer again, and 1.28 while that
  // forgot what it had delivered); without a death every consumer 1.0-1.05.
  for (int i : {0, 1, 3, 4}) {
    const double copies = static_cast<double>(into(i) - before[i]) / static_cast<double>(report.stats.wire_bytes);
    EXPECT_LE(copies, 1.1) << "c" << i << " was sent " << copies << " copies of the version";
  }
  EXPECT_EQ(cluster.publish(true, false).committed, 4u);
  cluster.expect_exact({0, 1, 3, 4});
}

TEST(FakeEngine, ARelayThatDiesMidVersionIsRoutedAround) { a_relay_that_dies_mid_version_is_routed_around(1); }
TEST(FakeEngine, ARelayThatDiesMidVersionIsRoutedAroundInATree) { a_relay_that_dies_mid_version_is_routed_around(2); }

TEST(FakeEngine, TheRoundInFlightReportsHowFarItIs) {
  FakeCluster cluster(1 << 22, 3);
  cluster.publish(false, false);
  EXPECT_FALSE(cluster.producer().progress().has_value()) << "a round in flight between rounds";
  for (int node = 1; node <= 4; ++node) cluster.set_ports(node, 8e6);  // the full version takes over a second
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  const auto mid = cluster.producer().progress();
  ASSERT_TRUE(mid.has_value());
  EXPECT_EQ(mid->version, *v);
  EXPECT_TRUE(mid->full);
  EXPECT_EQ(mid->targets, 3u);
  EXPECT_EQ(mid->staged, 0u);
  EXPECT_GT(mid->received_bytes, 0u);
  EXPECT_LT(mid->fraction(), 1.0);
  EXPECT_GT(mid->eta_seconds(), 0.0);
  EXPECT_GT(mid->rate(), 0.0);
  std::this_thread::sleep_for(milliseconds(300));
  const auto later = cluster.producer().progress();
  ASSERT_TRUE(later.has_value());
  EXPECT_GT(later->received_bytes, mid->received_bytes) << "no progress reported in 300 ms at 8 MB/s a port";
  EXPECT_LE(later->received_bytes, later->bytes * later->targets);
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok());
  EXPECT_FALSE(cluster.producer().progress().has_value()) << "the round ended";
}

void a_relay_that_hangs_is_moved_to_the_tails(uint32_t fanout) {
  // A hung host keeps its control connection open: only its parents' sprayers, whose every rail
  // to it stops acknowledging, can tell. With the round's stall timeout at a minute, the others
  // get the version only if those parents report it and the round moves it to the tails.
  SCOPED_TRACE(fmt::format("fan-out {}", fanout));
  FakeCluster cluster(1 << 22, 5, milliseconds(60000), fanout);
  cluster.publish(false, false);
  for (int node = 1; node <= 6; ++node) cluster.set_ports(node, 8e6);  // the full version takes over a second
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  cluster.wait_mid_version();
  cluster.set_ports(4, 8e6, false);  // c2 hangs: nothing in or out, its connections stay open
  const auto others = {0, 1, 3, 4};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline &&
         !std::all_of(others.begin(), others.end(), [&](int i) { return cluster.rollouts[i]->consumer->version() == *v; })) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (int i : others) EXPECT_EQ(cluster.rollouts[i]->consumer->version(), *v) << "c" << i << " waited behind the hung c2";
  EXPECT_LT(cluster.rollouts[2]->consumer->version(), *v);
  // It comes back: at the tails it is fed the rest, and the round ends with everyone.
  cluster.set_ports(4, 8e6, true);
  ASSERT_TRUE(cluster.producer().wait(*v, testing::kEngineWait).ok());
  const VersionReport report = *cluster.producer().report(*v);
  EXPECT_EQ(report.fanout, fanout);
  EXPECT_EQ(report.committed, 5u);
  EXPECT_GE(report.replans, 1u);
  cluster.expect_exact(cluster.all());
}

TEST(FakeEngine, ARelayThatHangsIsMovedToTheTailsBeforeAnythingTimesOut) { a_relay_that_hangs_is_moved_to_the_tails(1); }
TEST(FakeEngine, ARelayThatHangsInATreeIsMovedBelowItBeforeAnythingTimesOut) {
  a_relay_that_hangs_is_moved_to_the_tails(2);
}

TEST(FakeEngine, AProducerGoneMidVersionLeavesEveryConsumerWithItsLastVersionWhole) {
  // The producer closes while a full version is on its way (slow ports: it takes over a second):
  // every consumer keeps the version it held, bit for bit, and says it lost the producer.
  FakeCluster cluster(1 << 22, 3);
  cluster.publish(false, false);
  cluster.publish(true, false);
  const uint64_t held = cluster.producer().stats().version;
  std::vector<std::unique_ptr<testing::TensorSet>> before;
  for (const auto& r : cluster.rollouts) {
    ASSERT_EQ(r->consumer->version(), held);
    before.push_back(std::make_unique<testing::TensorSet>(cluster.manifest()));
    before.back()->copy_from(*r->tensors);
  }
  for (int node = 1; node <= 4; ++node) cluster.set_ports(node, 8e6);
  cluster.trainer->trace->step();
  ASSERT_TRUE(cluster.producer().publish(true).ok());
  cluster.wait_mid_version();
  cluster.producer().close();
  for (size_t i = 0; i < cluster.rollouts.size(); ++i) {
    Consumer& c = *cluster.rollouts[i]->consumer;
    for (int wait = 0; wait < 250 && c.state().connected; ++wait) std::this_thread::sleep_for(milliseconds(20));
    const ConsumerState state = c.state();
    EXPECT_FALSE(state.connected) << "c" << i;
    EXPECT_EQ(state.version, held) << "c" << i;
    EXPECT_EQ(state.last_error.code(), StatusCode::kUnavailable) << "c" << i << ": " << state.last_error.to_string();
    EXPECT_TRUE(cluster.rollouts[i]->tensors->same_bits(*before[i])) << "c" << i << " was written mid-version";
    EXPECT_TRUE(cluster.rollouts[i]->tensors->guards_intact()) << "c" << i;
  }
}

TEST(FakeEngine, AConsumerThatNeverGetsTheVersionIsNamedWithWhereItStoodWhenTheRoundGivesUp) {
  // c1 hangs before the version (nothing in or out, its connections open) and never comes back:
  // the others commit around it, then the round stalls and says of c1 where it stood.
  FakeCluster cluster(1 << 20, 3, milliseconds(3000));
  cluster.publish(false, false);
  cluster.set_ports(3, kPortRate, false);
  auto v = cluster.producer().publish(true);
  ASSERT_TRUE(v.ok());
  std::optional<VersionReport> report;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !(report = cluster.producer().report(*v), report && report->done)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(report && report->done) << "the round never ended";
  EXPECT_EQ(report->committed, 2u);
  EXPECT_EQ(report->failed, 1u);
  EXPECT_EQ(report->why_not, (std::map<std::string, std::string>{{"c1", "round stalled: nothing of the version had reached it"}}));
  for (int i : {0, 2}) EXPECT_TRUE(cluster.rollouts[i]->matches(*cluster.trainer->trace)) << "consumer c" << i;
  cluster.set_ports(3, kPortRate, true);
}

// The others' staged times of one full round: the latest of them.
double others_staged(const VersionReport& report, const std::string& slow) {
  double latest = 0;
  for (const auto& [name, seconds] : report.staged_by) {
    if (name != slow) latest = std::max(latest, seconds);
  }
  return latest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void a_throttled_consumer_is_found_moved_to_the_tails_and_slows_nobody(uint32_t fanout) {
  SCOPED_TRACE(fmt::format("fan-out {}", fanout));
  // Six consumers; c5's ports drop to 30%. Every healthy link here keeps up with what it is
  // given (the modelled ports, not the cores, set the pace), the pattern in which the policy
  // used to find nobody: only the link into c5 is ever a bottleneck.
  FakeCluster cluster(1 << 22, 6, milliseconds(5000), fanout);
  std::vector<double> before;
  for (int round = 0; round < 3; ++round) {
    const VersionReport report = cluster.publish(false, true);
    EXPECT_TRUE(report.slow.empty()) << "round " << round << ": " << fmt::format("{}", report.slow);
    before.push_back(others_staged(report, "c5"));
  }
  cluster.set_ports(7, 0.3 * kPortRate);
  std::vector<std::vector<std::string>> tails;
  std::vector<double> after;
  for (int round = 0; round < 6; ++round) {
    const VersionReport report = cluster.publish(false, true);
    EXPECT_EQ(report.committed, 6u);
    tails.push_back(report.slow);
    if (round >= 3) after.push_back(others_staged(report, "c5"));
  }
  // The round right after the throttle measures it; the one after that plans with it.
  const auto found = std::find_if(tails.begin(), tails.end(), [](const auto& t) {
    return std::find(t.begin(), t.end(), "c5") != t.end();
  });
  ASSERT_NE(found, tails.end()) << "c5 never found slow";
  EXPECT_LE(found - tails.begin(), 1) << "found in round " << found - tails.begin();
  for (auto it = found; it != tails.end(); ++it) EXPECT_EQ(*it, std::vector<std::string>{"c5"});
  // At the tails it delays nobody: the others stage as fast as without the throttle, before it
  // and after it is lifted (a baseline from before alone once came out 1.28x faster than the
  // rounds after it while other tests loaded the cores: 0.143 s against 0.183 s).
  cluster.set_ports(7, kPortRate);
  for (int round = 0; round < 3; ++round) before.push_back(others_staged(cluster.publish(false, true), "c5"));
  EXPECT_LE(median(after), 1.25 * median(before)) << "without the throttle " << median(before) << " s, with it "
                                                  << median(after) << " s";
  cluster.expect_exact(cluster.all());
}

// The planner's shape (on these six, mostly chains), and trees 2 wide forced: found, moved and
// exact there too. (The trees case passes with c5 below the stripe's last healthy member as well:
// the slowdown that hanging it from an uplink with room prevents shows in the simulator and in
// Planner.ASlowMemberInTreesHangsFromAnUplinkWithRoom, not over these modelled ports.)
TEST(FakeEngine, AThrottledConsumerIsFoundMovedToTheTailsAndSlowsNobody) {
  a_throttled_consumer_is_found_moved_to_the_tails_and_slows_nobody(0);
}
TEST(FakeEngine, AThrottledConsumerInTreesIsFoundMovedToTheTailsAndSlowsNobody) {
  a_throttled_consumer_is_found_moved_to_the_tails_and_slows_nobody(2);
}

}  // namespace
}  // namespace deltacast
