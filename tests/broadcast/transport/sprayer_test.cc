// The sprayer's policy over the fake backend: spraying by bandwidth, failover
// on errors and stalls, duplicate suppression, backoff and recovery, and a
// clear error when every rail is gone. Real sockets are tested in
// tests/netns/.
#include "broadcast/transport/sprayer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <algorithm>
#include <bit>
#include <numeric>
#include <random>
#include <thread>

#include "broadcast/testing/fake/transport.h"
#include "broadcast/testing/faulty_channel.h"
#include "broadcast/transport/staging.h"
#include "core/hash.h"
#include "core/thread_pool.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;

struct Bench {
  fake::FakeNetwork network;
  fake::FakeTransport transport{&network};
  StagingArea staging;
  std::unique_ptr<Listener> listener;
  std::vector<FaultyChannel*> faulty;  // owned by the sprayer
  std::unique_ptr<Sprayer> sprayer;
  std::vector<uint8_t> data;

  Bench(std::vector<double> rates, SprayOptions options, uint64_t bytes, std::vector<FaultPlan> plans = {}) {
    data.resize(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
    std::vector<Endpoint> endpoints;
    std::vector<std::unique_ptr<Channel>> channels;
    for (size_t r = 0; r < rates.size(); ++r) {
      const Endpoint remote{"10.0.0." + std::to_string(r + 1), 9000};
      endpoints.push_back(remote);
      RailSpec rail{Endpoint{"10.1.0." + std::to_string(r + 1), 0}, remote, "rail" + std::to_string(r)};
      network.set_link(rail.name, fake::LinkModel{std::chrono::microseconds(100), rates[r], true});
      auto channel = std::make_unique<FaultyChannel>(transport.connect(rail, {}).value(), r < plans.size() ? plans[r] : FaultPlan{});
      faulty.push_back(channel.get());
      channels.push_back(std::move(channel));
    }
    listener = transport.listen(endpoints, &staging, {}).value();
    sprayer = std::make_unique<Sprayer>(std::move(channels), options);
  }

  Result<TransferResult> send(uint64_t id) {
    EXPECT_TRUE(staging.expect(id, data.size()).ok());
    return sprayer->send(id, data.data(), data.size());
  }
  bool delivered_exactly(uint64_t id) const {
    const auto got = staging.bytes(id);
    return staging.complete(id) && got.size() == data.size() && std::equal(got.begin(), got.end(), data.begin());
  }
  void set_link(uint32_t r, bool up, double rate) {
    network.set_link("rail" + std::to_string(r), fake::LinkModel{std::chrono::microseconds(100), rate, up});
  }
};

SprayOptions fast_options() {
  SprayOptions o;
  o.slice_bytes = 64 << 10;
  o.min_deadline = milliseconds(40);
  o.first_deadline = milliseconds(200);
  o.stall_timeout = milliseconds(1500);
  return o;
}

TEST(Sprayer, DeliversEveryByteOverSeveralRails) {
  Bench b({200e6, 200e6, 200e6}, fast_options(), 16 << 20);
  // Healthy rails need (next to) no re-sends. A thread this machine stalls past a 40 ms deadline
  // re-sends its slices (seen with other tests on both cores), so one of three transfers must
  // manage with at most 5% re-sent; every one must deliver every byte.
  std::vector<uint64_t> resent;
  uint64_t slices = 0;
  for (uint64_t id = 1; id <= 3; ++id) {
    auto r = b.send(id);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(b.delivered_exactly(id));
    resent.push_back(r->resent_slices);
    slices = r->slices;
    if (r->resent_slices <= slices / 20) break;
  }
  EXPECT_LE(resent.back(), slices / 20) << "re-sent slices per transfer: " << ::testing::PrintToString(resent);
  uint64_t acked = 0;
  for (const auto& t : b.sprayer->telemetry()) {
    EXPECT_GT(t.bytes_acked, 0u) << t.name << " carried nothing";
    acked += t.bytes_acked;
  }
  EXPECT_GE(acked, b.data.size());
}

TEST(Sprayer, SharesFollowBandwidthAndBeatRoundRobin) {
  SprayOptions spray = fast_options();
  Bench sprayed({100e6, 100e6, 10e6}, spray, 24 << 20);
  auto s = sprayed.send(1);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(sprayed.delivered_exactly(1));
  const auto t = sprayed.sprayer->telemetry();
  const double slow_share = static_cast<double>(t[2].bytes_acked) / static_cast<double>(t[0].bytes_acked + t[1].bytes_acked + t[2].bytes_acked);
  EXPECT_LT(slow_share, 0.2) << "the slow rail (5% of the bandwidth) carried " << slow_share;
  SprayOptions rr = fast_options();
  rr.mode = SprayMode::kRoundRobin;
  Bench striped({100e6, 100e6, 10e6}, rr, 24 << 20);
  auto r = striped.send(1);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(striped.delivered_exactly(1));
  // Striping waits for the slow rail: a third of the bytes at 10 MB/s (0.8 s); spraying needs
  // about 24 MB / 210 MB/s.
  EXPECT_GT(r->seconds, 1.5 * s->seconds) << "spray " << s->seconds << " s, round robin " << r->seconds << " s";
}

TEST(Sprayer, FailsOverWhenARailStallsSilently) {
  Bench b({80e6, 80e6, 80e6}, fast_options(), 24 << 20);
  std::thread cut([&] {
    std::this_thread::sleep_for(milliseconds(40));
    b.set_link(1, false, 80e6);  // link down mid-transfer: slices on it just stop
  });
  auto r = b.send(1);
  cut.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(b.delivered_exactly(1));
  EXPECT_GT(r->resent_slices, 0u);
  const auto t = b.sprayer->telemetry();
  EXPECT_GT(t[1].timeouts, 0u);
  EXPECT_NE(t[1].state, RailState::kHealthy);
  EXPECT_EQ(b.staging.progress(1).arrived, b.staging.progress(1).slices);
}

TEST(Sprayer, RefusedAndFailingRailsAreWorkedAround) {
  FaultPlan refuse{FaultPlan::kRefuse, milliseconds(0), 0};
  FaultPlan fail_after{FaultPlan::kRefuse, milliseconds(0), 20};
  Bench b({150e6, 150e6, 150e6}, fast_options(), 16 << 20, {refuse, fail_after});
  auto r = b.send(1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(b.delivered_exactly(1));
  const auto t = b.sprayer->telemetry();
  EXPECT_EQ(t[0].bytes_acked, 0u);
  EXPECT_GT(t[0].errors, 0u);
  EXPECT_GT(t[1].errors, 0u);
  EXPECT_GT(t[1].bytes_acked, 0u) << "the first 20 sends went through";
  EXPECT_GT(t[2].bytes_acked, 0u);
}

TEST(Sprayer, CorruptedSlicesAreRejectedAndResent) {
  FaultPlan corrupt{FaultPlan::kCorrupt, milliseconds(0), 5};
  Bench b({150e6, 150e6}, fast_options(), 8 << 20, {corrupt});
  auto r = b.send(1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(b.delivered_exactly(1));
  EXPECT_GT(b.staging.progress(1).rejected, 0u);
}

TEST(Sprayer, LateCopiesAreSuppressedAsDuplicates) {
  // One rail delivers everything, but far past its deadlines: the slices go again elsewhere and
  // the late copies arrive as duplicates. Nothing counts twice.
  FaultPlan slow{FaultPlan::kDelay, milliseconds(300), 0};
  Bench b({150e6, 150e6}, fast_options(), 8 << 20, {slow});
  auto r = b.send(1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::this_thread::sleep_for(milliseconds(400));  // the late copies land now
  EXPECT_TRUE(b.delivered_exactly(1));
  const TransferProgress p = b.staging.progress(1);
  EXPECT_EQ(p.arrived, p.slices);
  EXPECT_GT(r->resent_slices, 0u);
}

TEST(Sprayer, RecoveredRailIsUsedAgain) {
  Bench b({100e6, 100e6}, fast_options(), 16 << 20);
  b.set_link(1, false, 100e6);
  auto first = b.send(1);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_NE(b.sprayer->telemetry()[1].state, RailState::kHealthy);
  b.set_link(1, true, 100e6);
  std::atomic<int64_t> acked_on_rail1{0};
  b.sprayer->set_observer([&](const SprayEvent& e) {
    if (e.kind == SprayEvent::kAcked && e.rail == 1) acked_on_rail1 += e.bytes;
  });
  // Backoff is at most a second: within two, probes find the rail and it carries slices again.
  auto second = b.send(2);
  ASSERT_TRUE(second.ok());
  for (int i = 0; i < 20 && acked_on_rail1 == 0; ++i) {
    auto more = b.send(3 + i);
    ASSERT_TRUE(more.ok());
  }
  EXPECT_GT(acked_on_rail1.load(), 0);
  EXPECT_EQ(b.sprayer->telemetry()[1].state, RailState::kHealthy);
}

TEST(Sprayer, AllRailsDownIsAClearErrorInBoundedTime) {
  SprayOptions o = fast_options();
  o.stall_timeout = milliseconds(300);
  Bench b({100e6, 100e6}, o, 8 << 20);
  b.set_link(0, false, 100e6);
  b.set_link(1, false, 100e6);
  const auto start = SteadyClock::now();
  auto r = b.send(1);
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no slice delivered"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("rail0"), std::string::npos);
  EXPECT_LT(elapsed, 2.0);
  EXPECT_FALSE(b.staging.complete(1)) << "nothing half-delivered is reported as done";
}

// A relay offers slices and never waits: when its rails stall for longer than the stall limit
// it keeps trying (the round, which sees every member's progress, decides), so the child still
// gets the slices once a rail is back. A caller that waits is told of a stall as before.
TEST(Sprayer, ARelayKeepsTryingThroughAStallNobodyWaitsOn) {
  SprayOptions o = fast_options();
  o.stall_timeout = milliseconds(300);
  Bench b({100e6, 100e6}, o, 4 << 20);
  b.set_link(0, false, 100e6);
  b.set_link(1, false, 100e6);
  ASSERT_TRUE(b.staging.expect(1, b.data.size(), 64 << 10).ok());
  ASSERT_TRUE(b.sprayer->open(1, b.data.data(), b.data.size(), 64 << 10).ok());
  b.sprayer->offer_all();
  std::this_thread::sleep_for(milliseconds(1000));  // three stall limits with every rail down
  EXPECT_FALSE(b.staging.complete(1));
  b.set_link(0, true, 100e6);
  b.set_link(1, true, 100e6);
  auto r = b.sprayer->wait(milliseconds(15000));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  b.sprayer->close();
  EXPECT_TRUE(b.delivered_exactly(1));

  // The same stall with a caller waiting through it fails the transfer.
  b.set_link(0, false, 100e6);
  b.set_link(1, false, 100e6);
  ASSERT_TRUE(b.staging.expect(2, b.data.size(), 64 << 10).ok());
  ASSERT_TRUE(b.sprayer->open(2, b.data.data(), b.data.size(), 64 << 10).ok());
  b.sprayer->offer_all();
  auto stalled = b.sprayer->wait(milliseconds(15000));
  ASSERT_FALSE(stalled.ok());
  EXPECT_NE(stalled.status().message().find("no slice delivered"), std::string::npos) << stalled.status().message();
  b.sprayer->close();
}

TEST(Sprayer, DroppedSlicesMissTheirDeadlineAndGoElsewhere) {
  FaultPlan drop{FaultPlan::kDrop, milliseconds(0), 3};
  Bench b({150e6, 150e6, 150e6}, fast_options(), 8 << 20, {drop});
  auto r = b.send(1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(b.delivered_exactly(1));
  EXPECT_GT(b.sprayer->telemetry()[0].timeouts, 0u);
}

TEST(Sprayer, RelaysOfferSlicesAsTheyArriveAndSkipWhatTheChildHas) {
  // A relay forwards slices in whatever order they reach it, while they keep arriving.
  Bench b({150e6, 150e6}, fast_options(), 4 << 20);
  const uint32_t slice_bytes = 64 << 10;
  ASSERT_TRUE(b.staging.expect(1, b.data.size(), slice_bytes).ok());
  auto opened = b.sprayer->open(1, b.data.data(), b.data.size(), slice_bytes);
  ASSERT_TRUE(opened.ok());
  const uint32_t slices = static_cast<uint32_t>(b.data.size() / slice_bytes);
  // The child already holds the first 10 slices (delivered another way).
  for (uint32_t i = 0; i < 10; ++i) {
    SliceRef s{1, b.data.size(), slice_bytes, i, slice_bytes, 0};
    s.checksum = content_hash(b.data.data() + s.offset(), s.length);
    ASSERT_TRUE(*fake::deliver(b.staging, s, b.data.data() + s.offset()));
    b.sprayer->skip(i);
  }
  std::vector<uint32_t> order;
  for (uint32_t i = 10; i < slices; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  // Nothing offered for a while is no stall.
  std::this_thread::sleep_for(milliseconds(50));
  for (size_t k = 0; k < order.size(); ++k) {
    b.sprayer->offer(order[k]);
    if (k % 8 == 0) std::this_thread::sleep_for(milliseconds(2));
  }
  auto r = b.sprayer->wait(milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  b.sprayer->close();
  EXPECT_TRUE(b.delivered_exactly(1));
  EXPECT_EQ(b.staging.progress(1).duplicates, 0u) << "skipped slices were not sent again";
}

TEST(Sprayer, ProbesNeverSendSlicesThisSenderDoesNotHold) {
  // A relay skips the slices another path delivers; their bytes are not here. A rail that comes
  // back is probed with a delivered slice, never with a skipped one (it would go out with a
  // checksum of whatever the memory holds, and a receiver still missing it would take it).
  Bench b({150e6, 150e6}, fast_options(), 4 << 20, {{}, {FaultPlan::kRefuse}});
  const uint32_t slice_bytes = 64 << 10;
  const uint32_t slices = static_cast<uint32_t>(b.data.size() / slice_bytes);
  std::vector<uint8_t> here(b.data.size(), 0xee);  // skipped slots hold stale bytes
  ASSERT_TRUE(b.staging.expect(1, b.data.size(), slice_bytes).ok());
  ASSERT_TRUE(b.sprayer->open(1, here.data(), here.size(), slice_bytes).ok());
  for (uint32_t i = 0; i < 10; ++i) b.sprayer->skip(i);
  for (uint32_t i = 10; i < 40; ++i) {
    std::memcpy(here.data() + size_t{i} * slice_bytes, b.data.data() + size_t{i} * slice_bytes, slice_bytes);
    b.sprayer->offer(i);
  }
  // Everything offered is delivered (over rail 0) before rail 1 works again: nothing is pending.
  for (int i = 0; i < 200 && b.staging.progress(1).arrived < 30; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(b.staging.progress(1).arrived, 30u);
  const uint64_t probes_before = b.sprayer->telemetry()[1].probes;
  b.faulty[1]->set_plan({});
  // The rail's backoff ends within a second or two; then it is probed while nothing is pending.
  for (int i = 0; i < 40 && b.sprayer->telemetry()[1].probes == probes_before; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_GT(b.sprayer->telemetry()[1].probes, probes_before) << "the rail was never probed: the test proves nothing";
  const auto present = b.staging.present(1);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(present[i], 0) << "skipped slice " << i << " was sent";
  for (uint32_t i = 40; i < slices; ++i) {
    std::memcpy(here.data() + size_t{i} * slice_bytes, b.data.data() + size_t{i} * slice_bytes, slice_bytes);
    b.sprayer->offer(i);
  }
  auto r = b.sprayer->wait(milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  b.sprayer->close();
}

// Slices go out with the checksums derived from the leaf digests they are given (no channel
// hashes them), and the receiver holds the sender to them: leaves of other bytes get every
// slice refused, and the transfer fails rather than completing with unverified bytes.
TEST(Sprayer, ChecksumsFromTheCallersLeavesAreTheOnesVerified) {
  ThreadPool pool(2);
  {
    Bench b({200e6, 200e6}, fast_options(), (4 << 20) + 777);
    const std::vector<uint64_t> leaves = content_hash_leaves(b.data.data(), b.data.size(), pool);
    ASSERT_TRUE(b.staging.expect(1, b.data.size()).ok());
    auto r = b.sprayer->send(1, b.data.data(), b.data.size(), leaves);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(b.delivered_exactly(1));
    const TransferShape shape{1, b.data.size(), r->slice_bytes};
    EXPECT_EQ(*b.staging.digest(1), transfer_digest(slice_checksums(b.data.data(), shape, pool), b.data.size()));
  }
  {
    SprayOptions o = fast_options();
    o.stall_timeout = milliseconds(600);
    Bench b({200e6, 200e6}, o, 1 << 20);
    std::vector<uint8_t> other(b.data);
    other[70000] ^= 0x10;  // one bit in the second leaf
    const std::vector<uint64_t> leaves = content_hash_leaves(other.data(), other.size(), pool);
    ASSERT_TRUE(b.staging.expect(2, b.data.size()).ok());
    auto r = b.sprayer->send(2, b.data.data(), b.data.size(), leaves);
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(b.staging.complete(2));
  }
}

// Before any rail is measured a transfer is cut into 64 slices per rail; afterwards the slices
// follow the measured rates.
TEST(Sprayer, AFirstTransferIsCutByItsSizeThenByTheRailsRates) {
  SprayOptions o = fast_options();
  o.slice_bytes = 0;
  Bench b({200e6, 200e6}, o, 32 << 20);
  auto first = b.send(1);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->slice_bytes, uint32_t{256} << 10);  // 32 MiB / (64 x 2 rails)
  EXPECT_TRUE(b.delivered_exactly(1));
  // The second follows the slowest rail's measured rate: 2 ms of it (slice_time), as a power of
  // two within [min, max]. The rates are whatever this machine let the rails reach.
  double slowest = 0;
  for (const auto& t : b.sprayer->telemetry()) {
    ASSERT_GT(t.bandwidth_bps, 0) << t.name << " was not measured by the first transfer";
    if (t.state != RailState::kHealthy && t.state != RailState::kSuspect) continue;  // not one to send on now
    slowest = slowest == 0 ? t.bandwidth_bps : std::min(slowest, t.bandwidth_bps);
  }
  ASSERT_GT(slowest, 0);
  const double per_slice = slowest * std::chrono::duration<double>(o.slice_time).count();
  const uint64_t want =
      std::clamp<uint64_t>(std::bit_floor(static_cast<uint64_t>(per_slice)), o.min_slice_bytes, o.max_slice_bytes);
  auto second = b.send(2);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->slice_bytes, want) << "slowest rail measured at " << slowest / 1e6 << " MB/s";
  EXPECT_TRUE(b.delivered_exactly(2));
}

TEST(Sprayer, EmptyAndTinyTransfers) {
  Bench b({100e6, 100e6}, fast_options(), 1);
  auto r = b.send(1);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(b.delivered_exactly(1));
  EXPECT_TRUE(b.staging.expect(2, 0).ok());
  auto empty = b.sprayer->send(2, nullptr, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->slices, 0u);
}

}  // namespace
}  // namespace deltacast
