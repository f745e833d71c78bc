// The relay over the fake backend: slices go to the child the plan names for
// their stripe, and to that child's endpoints even when its id was handed out
// before to another peer (a new producer numbers its consumers afresh).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "broadcast/engine/relay.h"
#include "broadcast/testing/fake/transport.h"
#include "broadcast/transport/staging.h"
#include "core/hash.h"
#include "support/test_trust.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
constexpr uint32_t kSliceBytes = 4096;

fake::FakeNetwork network;
const auto transport = std::make_shared<fake::FakeTransport>(&network);

struct Child {
  StagingArea staging;
  std::unique_ptr<Listener> listener;

  explicit Child(int host) {
    listener = transport->listen({{"10.0.0." + std::to_string(host), 7000}}, &staging, {}).value();
  }
};

Relay make_relay() {
  RelayOptions options;
  options.transport = transport;
  options.local_rails = {{"10.0.0.1", 0}};
  options.channel.trust = testing::test_trust(0x7e1a);
  options.spray.stall_timeout = milliseconds(2000);
  return Relay(options);
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

uint64_t slice_checksum(const std::vector<uint8_t>& data, uint32_t slice) {
  const size_t offset = size_t{slice} * kSliceBytes;
  return content_hash(data.data() + offset, std::min<size_t>(kSliceBytes, data.size() - offset));
}

// Forwards a whole transfer, one stripe, to the child with id `id` at `to`.
void forward_all(Relay& relay, uint64_t transfer, const std::vector<uint8_t>& data, uint32_t id, const Child& to) {
  relay.begin(TransferShape{transfer, data.size(), kSliceBytes}, data.data(), 1, nullptr);
  ASSERT_TRUE(relay.set_children({{id}}, {{id, to.listener->endpoints()}}, {}).ok());
  const uint32_t slices = static_cast<uint32_t>((data.size() + kSliceBytes - 1) / kSliceBytes);
  for (uint32_t i = 0; i < slices; ++i) relay.on_slice(transfer, i, slice_checksum(data, i));
}

// Copies of slices the child `id` acknowledged, over every rail.
uint64_t slices_acked(const Relay& relay, uint32_t id) {
  uint64_t n = 0;
  for (const auto& rail : relay.telemetry(id)) n += rail.slices_acked;
  return n;
}

void expect_received(Child& child, uint64_t transfer, const std::vector<uint8_t>& data) {
  ASSERT_TRUE(child.staging.wait(transfer, milliseconds(5000)).ok()) << "the child did not receive the transfer";
  const auto got = child.staging.bytes(transfer);
  ASSERT_EQ(got.size(), data.size());
  EXPECT_EQ(std::memcmp(got.data(), data.data(), data.size()), 0);
}

TEST(Relay, ForwardsEverySliceToTheChildOfItsStripe) {
  Child a(21), b(22);
  Relay relay = make_relay();
  const auto data = pattern(10 * kSliceBytes + 17, 1);
  ASSERT_TRUE(a.staging.expect(1, data.size(), kSliceBytes).ok());
  ASSERT_TRUE(b.staging.expect(1, data.size(), kSliceBytes).ok());
  relay.begin(TransferShape{1, data.size(), kSliceBytes}, data.data(), 2, nullptr);
  ASSERT_TRUE(relay.set_children({{5}, {6}}, {{5, a.listener->endpoints()}, {6, b.listener->endpoints()}}, {}).ok());
  for (uint32_t i = 0; i < 11; ++i) relay.on_slice(1, i, slice_checksum(data, i));
  // Stripe 0 (even slices) goes to a, stripe 1 to b; nobody gets the other's.
  for (int spin = 0; spin < 500 && (a.staging.progress(1).arrived < 6 || b.staging.progress(1).arrived < 5); ++spin) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto at_a = a.staging.present(1);
  const auto at_b = b.staging.present(1);
  for (uint32_t i = 0; i < 11; ++i) {
    EXPECT_EQ(at_a[i], i % 2 == 0 ? 1 : 0) << "slice " << i;
    EXPECT_EQ(at_b[i], i % 2 == 1 ? 1 : 0) << "slice " << i;
  }
  relay.end();
}

// A tree: one stripe fans out to two children, the other to a third; each gets every slice of
// its stripe whole, and nothing of the other.
TEST(Relay, FansEachSliceOutToEveryChildOfItsStripe) {
  Child a(31), b(32), c(33);
  Relay relay = make_relay();
  const auto data = pattern(12 * kSliceBytes + 5, 4);
  for (Child* child : {&a, &b, &c}) ASSERT_TRUE(child->staging.expect(1, data.size(), kSliceBytes).ok());
  relay.begin(TransferShape{1, data.size(), kSliceBytes}, data.data(), 2, nullptr);
  ASSERT_TRUE(relay
                  .set_children({{5, 6}, {7}},
                                {{5, a.listener->endpoints()}, {6, b.listener->endpoints()}, {7, c.listener->endpoints()}},
                                {})
                  .ok());
  for (uint32_t i = 0; i < 13; ++i) relay.on_slice(1, i, slice_checksum(data, i));
  const auto arrived = [&](Child& child) { return child.staging.progress(1).arrived; };
  for (int spin = 0; spin < 500 && (arrived(a) < 7 || arrived(b) < 7 || arrived(c) < 6); ++spin) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto at_a = a.staging.present(1), at_b = b.staging.present(1), at_c = c.staging.present(1);
  const auto got_a = a.staging.bytes(1), got_b = b.staging.bytes(1);
  for (uint32_t i = 0; i < 13; ++i) {
    EXPECT_EQ(at_a[i], i % 2 == 0 ? 1 : 0) << "slice " << i;
    EXPECT_EQ(at_b[i], i % 2 == 0 ? 1 : 0) << "slice " << i;
    EXPECT_EQ(at_c[i], i % 2 == 1 ? 1 : 0) << "slice " << i;
    if (i % 2 == 0) {
      const size_t offset = size_t{i} * kSliceBytes, length = std::min<size_t>(kSliceBytes, data.size() - offset);
      EXPECT_EQ(std::memcmp(got_a.data() + offset, data.data() + offset, length), 0) << "slice " << i;
      EXPECT_EQ(std::memcmp(got_b.data() + offset, data.data() + offset, length), 0) << "slice " << i;
    }
  }
  relay.end();
}

TEST(Relay, AnIdThatNowNamesAnotherPeerReachesTheNewPeer) {
  Child a(23), b(24);
  Relay relay = make_relay();
  const auto first = pattern(8 * kSliceBytes, 2);
  ASSERT_TRUE(a.staging.expect(1, first.size(), kSliceBytes).ok());
  forward_all(relay, 1, first, 7, a);
  expect_received(a, 1, first);
  relay.end();
  // A new producer: id 7 is now b.
  const auto second = pattern(8 * kSliceBytes, 3);
  ASSERT_TRUE(b.staging.expect(2, second.size(), kSliceBytes).ok());
  ASSERT_TRUE(a.staging.expect(2, second.size(), kSliceBytes).ok());
  forward_all(relay, 2, second, 7, b);
  expect_received(b, 2, second);
  EXPECT_EQ(a.staging.progress(2).arrived, 0u) << "the peer that used to have the id got slices";
  relay.end();
}

// A relay forwarding a transfer of 10 slices in two stripes, the first to 5 (at a), the second
// to 6 (at b), with c standing by for 7; `start` offers the first `offered` slices and waits
// until 5 acknowledged its share of them.
struct TwoStripes {
  Child a, b, c;
  Relay relay = make_relay();
  std::vector<uint8_t> data;

  TwoStripes(int host, uint64_t seed) : a(host), b(host + 1), c(host + 2), data(pattern(10 * kSliceBytes, seed)) {}

  void start(uint32_t offered) {
    for (Child* child : {&a, &b, &c}) ASSERT_TRUE(child->staging.expect(1, data.size(), kSliceBytes).ok());
    relay.begin(TransferShape{1, data.size(), kSliceBytes}, data.data(), 2, nullptr);
    ASSERT_TRUE(relay.set_children({{5}, {6}}, {{5, a.listener->endpoints()}, {6, b.listener->endpoints()}}, {}).ok());
    offer(0, offered);
    const uint64_t share = (offered + 1) / 2;
    for (int spin = 0; spin < 500 && acked(5) < share; ++spin) std::this_thread::sleep_for(milliseconds(10));
    ASSERT_EQ(acked(5), share);
  }
  void offer(uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; ++i) relay.on_slice(1, i, slice_checksum(data, i));
  }
  uint64_t acked(uint32_t id) const { return slices_acked(relay, id); }
};

TEST(Relay, AReplanLeavesAChildThatKeepsItsStripesAlone) {
  // Member 6 died: its stripe goes to 7 instead, and 5, which keeps its stripe, is told the new
  // plan too (with no report of what it holds). It must not be sent its stripe again.
  TwoStripes t(25, 4);
  ASSERT_NO_FATAL_FAILURE(t.start(10));
  ASSERT_TRUE(t.relay.set_children({{5}, {7}}, {{5, t.a.listener->endpoints()}, {7, t.c.listener->endpoints()}}, {}).ok());
  for (int spin = 0; spin < 500 && t.c.staging.progress(1).arrived < 5; ++spin) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(t.c.staging.progress(1).arrived, 5u) << "the new child got its stripe";
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(t.acked(5), 5u) << "the child that kept its stripe was sent it again";
  t.relay.end();
}

TEST(Relay, AChildWhoseStripesChangeHasItsOpenTransferExtended) {
  // Member 6 died: 5 takes its stripe 1 from here and gives stripe 0 up to 7. 5's transfer stays
  // open: it gets the gained stripe's slices, offered before or after, none of the lost stripe's
  // from then on, and nothing twice.
  TwoStripes t(35, 5);
  ASSERT_NO_FATAL_FAILURE(t.start(6));
  ASSERT_TRUE(t.relay.set_children({{7}, {5}}, {{5, t.a.listener->endpoints()}, {7, t.c.listener->endpoints()}}, {}).ok());
  t.offer(6, 10);
  for (int spin = 0; spin < 500 && (t.a.staging.progress(1).arrived < 8 || t.c.staging.progress(1).arrived < 5);
       ++spin) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(50));
  const auto at_a = t.a.staging.present(1), at_c = t.c.staging.present(1);
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(at_a[i], i % 2 == 1 || i < 6 ? 1 : 0) << "slice " << i << " at 5";
    EXPECT_EQ(at_c[i], i % 2 == 0 ? 1 : 0) << "slice " << i << " at 7";
  }
  EXPECT_EQ(t.acked(5), 8u) << "5 was sent a slice twice";
  t.relay.end();
}

TEST(Relay, ReportsASilentChildOnlyWhileItHearsItself) {
  Child a(28);
  RelayOptions options;
  options.transport = transport;
  options.local_rails = {{"10.0.0.1", 0}};
  options.channel.trust = testing::test_trust(0x7e1a);
  options.spray.stall_timeout = milliseconds(5000);
  options.unreachable_after = milliseconds(300);
  Relay relay(options);
  const auto data = pattern(40 * kSliceBytes, 5);
  ASSERT_TRUE(a.staging.expect(1, data.size(), kSliceBytes).ok());
  relay.begin(TransferShape{1, data.size(), kSliceBytes}, data.data(), 1, nullptr);
  ASSERT_TRUE(relay.set_children({{5}}, {{5, a.listener->endpoints()}}, {}).ok());
  for (uint32_t i = 0; i < 5; ++i) relay.on_slice(1, i, slice_checksum(data, i));
  for (int spin = 0; spin < 500 && a.staging.progress(1).arrived < 5; ++spin) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(a.staging.progress(1).arrived, 5u);
  // The child's port goes silent; the relay's last slice comes 100 ms after the child last
  // acknowledged, then nothing more: both are cut off, and at 350 ms the child has been silent for
  // longer than the window while the relay has not. The relay must still not report it.
  network.set_port("10.0.0.28", fake::PortModel{0, false});
  const auto cut = std::chrono::steady_clock::now();
  relay.on_slice(1, 5, slice_checksum(data, 5));
  std::this_thread::sleep_for(milliseconds(100));
  relay.on_slice(1, 6, slice_checksum(data, 6));
  std::this_thread::sleep_until(cut + milliseconds(350));
  EXPECT_TRUE(relay.unreachable_children().empty()) << "a relay cut off itself reported its child";
  // Slices reach the relay again (every 50 ms) while the child stays silent: now it reports it.
  std::vector<uint32_t> reported;
  for (uint32_t i = 7; i < 40 && reported.empty(); ++i) {
    relay.on_slice(1, i, slice_checksum(data, i));
    std::this_thread::sleep_for(milliseconds(50));
    reported = relay.unreachable_children();
  }
  EXPECT_EQ(reported, std::vector<uint32_t>{5}) << "a relay that hears its parents did not report its silent child";
  network.set_port("10.0.0.28", fake::PortModel{});
  relay.end();
}

}  // namespace
}  // namespace deltacast
