// The simulated backend under the real sprayer, driven by the simulated clock with no scheduler
// thread: a transfer over two rails takes the time the ports' rates say and uses both; a port
// that goes down mid-transfer stalls its slices silently until their deadlines move them to the
// other rail, and nothing is lost or doubled; ports shared by several senders are shared.
#include "broadcast/transport/sim/transport.h"

#include <gtest/gtest.h>

#include <set>

#include "broadcast/transport/sprayer.h"

namespace deltacast::sim {
namespace {

using std::chrono::milliseconds;

// A receiver that records which slices arrived, how often, and when first.
struct CountingSink : SliceSink {
  const TimeSource* clock = nullptr;
  std::map<uint32_t, int> arrived;
  std::map<uint32_t, TimePoint> first_at;
  Result<Landing> begin(const SliceRef&, CancelReceive) override { return Landing{}; }
  bool complete(const SliceRef& slice, const Landing&, bool verified) override {
    if (verified && ++arrived[slice.index] == 1 && clock != nullptr) first_at[slice.index] = clock->now();
    return verified;
  }
};

// A receiver that records when each slice arrived, by transfer * 1000 + slice.
struct TimedSink : SliceSink {
  explicit TimedSink(EventLoop* clock) : loop(clock) {}
  EventLoop* loop;
  std::map<uint64_t, TimePoint> arrived;
  Result<Landing> begin(const SliceRef&, CancelReceive) override { return Landing{}; }
  bool complete(const SliceRef& s, const Landing&, bool) override {
    arrived[s.transfer * 1000 + s.index] = loop->now();
    return true;
  }
};

double secs(TimePoint t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

// A channel from host `from` to the listener `to`.
std::unique_ptr<Channel> connect(SimTransport& transport, const char* from, const Listener& to) {
  RailSpec rail;
  rail.local = Endpoint{from, 0};
  rail.remote = to.endpoints()[0];
  return transport.connect(rail, {}).value();
}

struct TwoHosts {
  SimNetwork net;
  SimTransport transport{&net};
  CountingSink sink;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Sprayer> sprayer;

  // Sender a (rails 10.0.0.1, 10.1.0.1) to receiver b (10.0.0.2, 10.1.0.2), `rate` bytes/s per port.
  explicit TwoHosts(double rate) {
    for (const char* host : {"10.0.0.1", "10.1.0.1", "10.0.0.2", "10.1.0.2"}) net.set_port_rates(host, rate, rate);
    net.set_latency(std::chrono::microseconds(10));
    sink.clock = &net.clock();
    listener = transport.listen({{"10.0.0.2", 0}, {"10.1.0.2", 0}}, &sink, {}).value();
    std::vector<std::unique_ptr<Channel>> channels;
    const auto at = listener->endpoints();
    const std::string local[] = {"10.0.0.1", "10.1.0.1"};
    for (size_t r = 0; r < 2; ++r) {
      RailSpec rail;
      rail.local = Endpoint{local[r], 0};
      rail.remote = at[r];
      rail.name = "rail" + std::to_string(r);
      channels.push_back(transport.connect(rail, {}).value());
    }
    SprayOptions o;
    o.clock = &net.clock();
    o.scheduler_thread = false;
    o.slice_bytes = 1 << 20;
    sprayer = std::make_unique<Sprayer>(std::move(channels), o);
  }

  // Offers a transfer and runs the loop, polling the sprayer when it asks, until it is done.
  void run(uint64_t bytes, uint64_t transfer = 1) {
    static const uint8_t nothing = 0;  // the simulation never reads the bytes
    ASSERT_TRUE(sprayer->open(transfer, &nothing, bytes).ok());
    sprayer->offer_all();
    poll();
    net.loop().run([&] { return sprayer->finished(); }, net.loop().now() + std::chrono::seconds(60));
  }
  // The same with the slices offered one by one, `every` apart, as a relay forwards what trickles
  // in: the sender is never backlogged, so a measured rail always has room.
  void run_paced(uint64_t bytes, uint64_t transfer, std::chrono::microseconds every) {
    static const uint8_t nothing = 0;
    auto shape = sprayer->open(transfer, &nothing, bytes);
    ASSERT_TRUE(shape.ok());
    const TimePoint start = net.loop().now();
    for (uint32_t i = 0; i < shape->slices(); ++i) {
      net.loop().at(start + i * every, [this, i] {
        sprayer->offer(i);
        poll();
      });
    }
    net.loop().run([&] { return sprayer->finished(); }, start + std::chrono::seconds(60));
  }
  void poll() {
    const TimePoint next = sprayer->poll();
    if (next != TimePoint::max()) net.loop().at(next, [this] { poll(); });
  }
};

TEST(SimTransport, ASprayedTransferTakesWhatTheRatesSayOverBothRails) {
  TwoHosts h(100e6);  // 100 MB/s per port: two rails, 200 MB/s
  ASSERT_NO_FATAL_FAILURE(h.run(200 << 20));
  ASSERT_TRUE(h.sprayer->finished());
  EXPECT_EQ(h.sink.arrived.size(), 200u);
  for (const auto& [slice, n] : h.sink.arrived) EXPECT_EQ(n, 1) << "slice " << slice;
  const double t = secs(h.net.loop().now());
  EXPECT_GT(t, (200 << 20) / 200e6);
  EXPECT_LT(t, 1.1 * (200 << 20) / 200e6) << "both rails should carry about half";
  const auto telemetry = h.sprayer->telemetry();
  for (const auto& rail : telemetry) EXPECT_GT(rail.bytes_acked, uint64_t{70} << 20) << rail.name;
}

TEST(SimTransport, ARailThatGoesDownStallsUntilDeadlinesMoveItsSlicesAndNothingIsLostOrDoubled) {
  TwoHosts h(100e6);
  // Rail 1's sending port goes down 0.3 s in (simulated), for good.
  h.net.loop().at(TimePoint{} + milliseconds(300), [&] { h.net.set_port_up("10.1.0.1", false); });
  ASSERT_NO_FATAL_FAILURE(h.run(200 << 20));
  ASSERT_TRUE(h.sprayer->finished());
  EXPECT_EQ(h.sink.arrived.size(), 200u);
  for (const auto& [slice, n] : h.sink.arrived) EXPECT_EQ(n, 1) << "slice " << slice;
  const auto telemetry = h.sprayer->telemetry();
  EXPECT_GT(telemetry[1].timeouts, 0u) << "the silent loss was found by deadlines";
  EXPECT_NE(telemetry[1].state, RailState::kHealthy);
  // After the loss everything went over rail 0 at 100 MB/s: about 0.3 s + (200 MiB - 60 MiB) / 100 MB/s.
  const double t = secs(h.net.loop().now());
  EXPECT_GT(t, 0.3 + 130e6 / 100e6);
  EXPECT_LT(t, 0.3 + 170e6 / 100e6);
}

// A transfer that trickled in slower than one rail takes leaves the other rail unmeasured: the
// measured one was always free and won every choice. In the next transfer, which one rail cannot
// carry, the unmeasured rail is predicted at its sibling's rate, not at the 1 Gbit/s guess for a
// sprayer that knows nothing, so it takes slices as soon as the measured rail has one in flight.
// At the guess it would lose every choice until the measured rail had a queue_target (8 ms) of
// slices queued: 8 ms more for every slice, at every hop of a chain.
TEST(SimTransport, ARailUnmeasuredBesideAMeasuredOneTakesSlicesBeforeItsSiblingQueues) {
  TwoHosts h(1e9);  // 1 GB/s per port
  ASSERT_NO_FATAL_FAILURE(h.run_paced(64 << 20, 1, std::chrono::microseconds(2000)));  // 0.5 GB/s
  ASSERT_TRUE(h.sprayer->finished());
  ASSERT_GT(h.sprayer->telemetry()[0].bandwidth_bps, 0.0);
  ASSERT_EQ(h.sprayer->telemetry()[1].bandwidth_bps, 0.0) << "the trickle should have left rail 1 unmeasured";
  // 1 MiB slices every 0.7 ms (1.5 GB/s): more than one rail takes, less than two.
  const auto every = std::chrono::microseconds(700);
  const TimePoint start = h.net.loop().now();
  h.sink.arrived.clear();
  h.sink.first_at.clear();
  ASSERT_NO_FATAL_FAILURE(h.run_paced(400 << 20, 2, every));
  ASSERT_TRUE(h.sprayer->finished());
  double worst = 0;
  for (const auto& [slice, at] : h.sink.first_at) worst = std::max(worst, secs(at) - secs(start + slice * every));
  EXPECT_EQ(h.sink.first_at.size(), 400u);
  EXPECT_LT(worst, 0.004) << "a slice waited behind the measured rail's queue";
  EXPECT_GT(h.sprayer->telemetry()[1].bandwidth_bps, 0.0) << "rail 1 was never measured";
}

// The same unmeasured rail, across 2 ms of latency, in a transfer offered whole: it takes its
// measured sibling's rate as assumed, so its window opens at once, as a new sprayer's rails do
// from their NICs' other sprayers. Held to two slices a round trip until its first sample (16
// slices, 8 round trips), it carried a quarter of what it could while the measured rail took
// the rest: a first version too short for most rails to be measured left the next one, to 1,024
// simulated consumers, 2.5x slower.
TEST(SimTransport, ARailUnmeasuredBesideAMeasuredOneOpensItsWindowAtTheSiblingsRate) {
  TwoHosts h(1e9);
  ASSERT_NO_FATAL_FAILURE(h.run_paced(64 << 20, 1, std::chrono::microseconds(2000)));
  ASSERT_GT(h.sprayer->telemetry()[0].bandwidth_bps, 0.0);
  ASSERT_EQ(h.sprayer->telemetry()[1].bandwidth_bps, 0.0) << "the trickle should have left rail 1 unmeasured";
  h.net.set_latency(std::chrono::milliseconds(2));
  const double start = secs(h.net.loop().now());
  ASSERT_NO_FATAL_FAILURE(h.run(64 << 20, 2));
  ASSERT_TRUE(h.sprayer->finished());
  const double seconds = secs(h.net.loop().now()) - start;
  const double line = (64 << 20) / 2e9 + 0.004;  // both rails full, one round trip
  EXPECT_LT(seconds, 1.15 * line) << "rail 1 carried " << h.sprayer->telemetry()[1].bytes_acked << " bytes";
}

TEST(SimTransport, APortSharedBySendersIsShared) {
  SimNetwork net;
  net.set_port_rates("r", 0, 100e6);  // the receiver's port takes 100 MB/s in all
  const TimePoint a = net.transmit(net.port_of("s1"), net.port_of("r"), 100'000'000);
  const TimePoint b = net.transmit(net.port_of("s2"), net.port_of("r"), 100'000'000);
  EXPECT_NEAR(secs(a), 1.0, 1e-3);
  EXPECT_NEAR(secs(b), 2.0, 1e-3) << "the second slice waits for the port";
  // A node limit shared by two ports of one host.
  net.set_node("n0", "node");
  net.set_node("n1", "node");
  net.set_node_limit("node", 50e6);
  const TimePoint c = net.transmit(net.port_of("n0"), net.port_of("x"), 50'000'000);
  const TimePoint d = net.transmit(net.port_of("n1"), net.port_of("y"), 50'000'000);
  EXPECT_NEAR(secs(c), 1.0, 1e-3);
  EXPECT_NEAR(secs(d), 2.0, 1e-3);
}

// Sites: a slice between two sites crosses their WAN link, at its rate (shared by every flow
// between them, each way) and its latency instead of the network's; within a site nothing
// changes; the bytes into each site are counted; a link that is down cannot be crossed.
TEST(SimTransport, AWanLinkBetweenSitesIsSharedAndHasItsOwnLatency) {
  SimNetwork net;
  net.set_latency(std::chrono::microseconds(5));
  for (const char* host : {"a1", "a2"}) net.set_site(host, 0);
  for (const char* host : {"b1", "b2"}) net.set_site(host, 1);
  net.set_wan(0, 1, 100e6, std::chrono::milliseconds(40));
  const TimePoint local = net.transmit(net.port_of("a1"), net.port_of("a2"), 1000);
  EXPECT_NEAR(secs(local), 5e-6, 1e-7) << "within a site: the network's latency, no WAN";
  const TimePoint x = net.transmit(net.port_of("a1"), net.port_of("b1"), 100'000'000);
  const TimePoint y = net.transmit(net.port_of("a2"), net.port_of("b2"), 100'000'000);
  EXPECT_NEAR(secs(x), 1.04, 1e-3) << "1 s at the link's rate and its 40 ms";
  EXPECT_NEAR(secs(y), 2.04, 1e-3) << "the second flow waits for the shared link";
  const TimePoint back = net.transmit(net.port_of("b1"), net.port_of("a1"), 100'000'000);
  EXPECT_NEAR(secs(back), 1.04, 1e-3) << "the other direction is a link of its own";
  EXPECT_EQ(net.wan_bytes_into(1), 200'000'000u);
  EXPECT_EQ(net.wan_bytes_into(0), 100'000'000u);
  EXPECT_EQ(net.latency(net.port_of("a1"), net.port_of("b2")), std::chrono::milliseconds(40));
  EXPECT_TRUE(net.passable(net.port_of("a1"), net.port_of("b1")));
  net.set_wan_up(1, 0, false);
  EXPECT_FALSE(net.passable(net.port_of("a1"), net.port_of("b1")));
  EXPECT_FALSE(net.passable(net.port_of("b2"), net.port_of("a2")));
  EXPECT_TRUE(net.passable(net.port_of("a1"), net.port_of("a2"))) << "a site's own network still works";
}

// The receiver's heartbeats, modelled: heard while the path back is open; once a port or the WAN
// link on it goes down, silent from a latency after that (the last heartbeat's crossing), and
// heard again when it comes back; nothing to say of a receiver that no longer listens.
TEST(SimTransport, AReceiverIsHeardWhileThePathBackIsOpen) {
  SimNetwork net;
  SimTransport transport{&net};
  net.set_site("a1", 0);
  for (const char* host : {"b1", "b2"}) net.set_site(host, 1);
  net.set_wan(0, 1, 100e6, milliseconds(40));
  CountingSink sink;
  auto listener = transport.listen({{"b1", 0}}, &sink, {}).value();
  auto channel = connect(transport, "a1", *listener);
  const auto at = [&](int ms, auto what) { net.loop().at(TimePoint{} + milliseconds(ms), what); };
  std::map<int, std::optional<Millis>> heard;  // by time
  for (int ms : {100, 200, 260, 500, 700, 900}) at(ms, [&, ms] { heard[ms] = channel->receiver_silent_for(); });
  at(150, [&] { net.set_wan_up(0, 1, false); });
  at(550, [&] { net.set_wan_up(0, 1, true); });
  at(600, [&] { net.set_port_up("b1", false); });
  at(800, [&] { listener.reset(); });
  net.loop().run([] { return false; }, TimePoint{} + milliseconds(1000));
  EXPECT_EQ(heard[100], Millis(0));
  EXPECT_EQ(heard[200], Millis(10)) << "cut at 150 ms, its last heartbeat in 40 ms later";
  EXPECT_EQ(heard[260], Millis(70));
  EXPECT_EQ(heard[500], Millis(310));
  EXPECT_EQ(heard[700], Millis(60)) << "its own port down at 600 ms";
  EXPECT_EQ(heard[900], std::nullopt) << "nobody listens: the control link tells";
}

// A channel made across a path already cut dials as a TCP channel does, its connects unanswered:
// not silent for two connect timeouts, then silent since it was made.
TEST(SimTransport, AChannelMadeAcrossACutPathDialsForTheGraceThenIsSilentSinceItWasMade) {
  SimNetwork net;
  SimTransport transport{&net};
  CountingSink sink;
  auto listener = transport.listen({{"b1", 0}}, &sink, {}).value();
  net.set_port_up("b1", false);
  std::unique_ptr<Channel> channel;
  std::map<int, std::optional<Millis>> heard;
  net.loop().at(TimePoint{} + milliseconds(100), [&] { channel = connect(transport, "a1", *listener); });
  for (int ms : {200, 1000, 1200}) {
    net.loop().at(TimePoint{} + milliseconds(ms), [&, ms] { heard[ms] = channel->receiver_silent_for(); });
  }
  net.loop().run([] { return false; }, TimePoint{} + milliseconds(3000));
  EXPECT_EQ(heard[200], Millis(0));
  EXPECT_EQ(heard[1000], Millis(0)) << "still dialling";
  EXPECT_EQ(heard[1200], Millis(1100)) << "silent since it was made";
}

// A port's per-slice cost: ten slices of 1 MB at 1 GB/s with 100 us each hold the port for 11 ms
// (plus the hop's latency), one slice of the same 10 MB for 10.1 ms.
TEST(SimTransport, APortSpendsItsSliceCostOnEverySlice) {
  SimNetwork net;
  net.set_latency(std::chrono::microseconds(5));
  net.set_slice_cost(std::chrono::microseconds(100));
  net.set_port_rates("s", 1e9, 0);
  TimePoint last{};
  for (int i = 0; i < 10; ++i) last = net.transmit(net.port_of("s"), net.port_of("r"), 1'000'000);
  EXPECT_NEAR(secs(last), 10 * (1e-3 + 100e-6) + 5e-6, 1e-7);
  net.set_port_rates("t", 1e9, 0);
  const TimePoint whole = net.transmit(net.port_of("t"), net.port_of("u"), 10'000'000);
  EXPECT_NEAR(secs(whole), 10e-3 + 100e-6 + 5e-6, 1e-7);
}

// A slow sender that queued many slices on its own port holds the receiver's port only as its
// slices reach it: a fast sender's slice that comes in between is not queued behind the slow
// one's later slices.
TEST(SimTransport, ASlowSendersBacklogDoesNotHoldTheReceiversPort) {
  SimNetwork net;
  SimTransport transport(&net);
  net.set_port_rates("slow", 100e6, 0);
  net.set_port_rates("fast", 10e9, 0);
  net.set_port_rates("c", 0, 1e9);
  TimedSink sink{&net.loop()};
  auto listener = transport.listen({{"c", 0}}, &sink, {}).value();
  auto slow = connect(transport, "slow", *listener);
  auto fast = connect(transport, "fast", *listener);
  int acked = 0;
  for (uint32_t i = 0; i < 10; ++i) {  // 10 x 10 MB leave the slow port 0.1 s apart
    slow->send(SliceRef{1, 100'000'000, 10'000'000, i, 10'000'000, 0, true}, nullptr, [&](Status s) { acked += s.ok(); });
  }
  net.loop().at(TimePoint{} + milliseconds(150), [&] {
    fast->send(SliceRef{2, 10'000'000, 10'000'000, 0, 10'000'000, 0, true}, nullptr, [&](Status s) { acked += s.ok(); });
  });
  net.loop().run([&] { return acked == 11; });
  ASSERT_EQ(acked, 11);
  // It left at 0.150 s and took 10 ms at the receiver's port, which the slow sender's slice then
  // in flight shares: well before the slow sender's last slice (about 1 s).
  EXPECT_LT(secs(sink.arrived.at(2000)), 0.2);
  EXPECT_NEAR(secs(sink.arrived.at(1009)), 1.0, 0.01);
}

// A port takes its channels in turns (of about 16 MiB, whole slices): a channel that posted ten
// 20 MB slices first does not hold the port for a channel that posts one a moment later (first
// come first served, that one waited for all ten).
TEST(SimTransport, APortServesItsChannelsInTurn) {
  SimNetwork net;
  SimTransport transport(&net);
  net.set_latency(std::chrono::microseconds(0));
  net.set_port_rates("s", 1e9, 0);
  TimedSink sink{&net.loop()};
  auto a_listener = transport.listen({{"a", 0}}, &sink, {}).value();
  auto b_listener = transport.listen({{"b", 0}}, &sink, {}).value();
  auto to_a = connect(transport, "s", *a_listener);
  auto to_b = connect(transport, "s", *b_listener);
  int acked = 0;
  constexpr uint32_t kSlice = 20'000'000;  // 20 ms each at the port
  for (uint32_t i = 0; i < 10; ++i) {
    to_a->send(SliceRef{1, 10 * kSlice, kSlice, i, kSlice, 0, true}, nullptr, [&](Status s) { acked += s.ok(); });
  }
  net.loop().at(TimePoint{} + milliseconds(10), [&] {
    to_b->send(SliceRef{2, kSlice, kSlice, 0, kSlice, 0, true}, nullptr, [&](Status s) { acked += s.ok(); });
  });
  net.loop().run([&] { return acked == 11; });
  ASSERT_EQ(acked, 11);
  EXPECT_NEAR(secs(sink.arrived.at(1001)), 40e-3, 1e-6) << "a's turn came first";
  EXPECT_NEAR(secs(sink.arrived.at(2000)), 60e-3, 1e-6) << "then b's, not after a's ten";
  EXPECT_NEAR(secs(sink.arrived.at(1002)), 80e-3, 1e-6) << "then a's again";
  EXPECT_NEAR(secs(sink.arrived.at(1009)), 220e-3, 1e-6) << "the port was never idle";
}

TEST(SimTransport, EventsRunInTimeOrderAndTheClockFollows) {
  EventLoop loop;
  std::vector<int> order;
  loop.at(TimePoint{} + milliseconds(20), [&] { order.push_back(2); });
  loop.at(TimePoint{} + milliseconds(10), [&] {
    order.push_back(1);
    loop.after(milliseconds(20), [&] { order.push_back(3); });
  });
  loop.at(TimePoint{} + milliseconds(20), [&] { order.push_back(22); });
  EXPECT_EQ(loop.run([] { return false; }), 4u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 22, 3}));
  EXPECT_EQ(loop.now(), TimePoint{} + milliseconds(30));
}

// A slice its node keeps from leaving at once reaches the receiver's port only as it starts
// leaving. Failed by a reset meanwhile, it still takes that port when it leaves (its bytes are on
// the wire), and a slice sent after the reset queues behind it there; the failed one is not
// delivered.
TEST(SimTransport, ASliceFailedByAResetWhileItsNodeIsBusyStillTakesTheReceiversPort) {
  SimNetwork net;
  SimTransport transport(&net);
  net.set_latency(std::chrono::microseconds(0));
  net.set_node("a1", "node");
  net.set_node("a2", "node");
  net.set_node_limit("node", 1e9);    // 1 ms a megabyte out of the node
  net.set_port_rates("b", 0, 0.5e9);  // 2 ms a megabyte into the receiver
  TimedSink sink{&net.loop()};
  auto listener = transport.listen({{"b", 0}}, &sink, {}).value();
  auto first = connect(transport, "a1", *listener);
  auto second = connect(transport, "a2", *listener);
  constexpr uint32_t kSlice = 1'000'000;
  std::vector<Status> done(3, not_found("not answered"));
  first->send(SliceRef{1, kSlice, kSlice, 0, kSlice, 0, true}, nullptr, [&](Status s) { done[0] = s; });
  // Leaves at 1 ms, when the node is done with the first.
  second->send(SliceRef{2, 2 * kSlice, kSlice, 0, kSlice, 0, true}, nullptr, [&](Status s) { done[1] = s; });
  second->reset();
  second->send(SliceRef{2, 2 * kSlice, kSlice, 1, kSlice, 0, true}, nullptr, [&](Status s) { done[2] = s; });
  net.loop().run([] { return false; });
  EXPECT_TRUE(done[0].ok()) << done[0].to_string();
  EXPECT_EQ(done[1].code(), StatusCode::kUnavailable) << "failed by the reset: " << done[1].to_string();
  EXPECT_TRUE(done[2].ok()) << done[2].to_string();
  EXPECT_NEAR(secs(sink.arrived.at(1000)), 2e-3, 1e-9);
  EXPECT_EQ(sink.arrived.count(2000), 0u) << "the failed slice was delivered";
  EXPECT_NEAR(secs(sink.arrived.at(2001)), 6e-3, 1e-9) << "not behind the failed slice's 2 ms at the receiver's port";
}

// Events addressed to a target (what the network and its channels schedule, with no function)
// run in time order among the others, in the order scheduled where times tie, with their `what`
// and `arg`; once the target is removed its events still pending do nothing.
TEST(SimTransport, EventsForATargetRunInOrderWithTheOthersAndNotOnceItIsRemoved) {
  struct Recorder : EventTarget {
    std::vector<std::pair<uint32_t, uint64_t>>* seen;
    void on_event(uint32_t what, uint64_t arg) override { seen->emplace_back(what, arg); }
  };
  EventLoop loop;
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  Recorder a, b;
  a.seen = b.seen = &seen;
  const uint32_t ta = loop.add_target(&a), tb = loop.add_target(&b);
  EXPECT_NE(ta, tb);
  loop.at(TimePoint{} + milliseconds(20), ta, 1, 100);
  loop.at(TimePoint{} + milliseconds(10), [&] { seen.emplace_back(0, 0); });
  loop.at(TimePoint{} + milliseconds(20), tb, 2, 200);
  loop.at(TimePoint{} + milliseconds(20), [&] {
    seen.emplace_back(0, 1);
    loop.remove_target(ta);
    loop.at(loop.now(), ta, 3, 300);  // for a removed target: nothing
    loop.at(loop.now(), tb, 4, 400);
  });
  loop.at(TimePoint{} + milliseconds(30), ta, 5, 500);  // pending when it was removed: nothing
  const uint32_t tc = loop.add_target(&a);  // a number of its own, not the removed one's
  EXPECT_NE(tc, ta);
  loop.at(TimePoint{} + milliseconds(40), tc, 6, 600);
  loop.run([] { return false; });
  EXPECT_EQ(seen, (std::vector<std::pair<uint32_t, uint64_t>>{{0, 0}, {1, 100}, {2, 200}, {0, 1}, {4, 400}, {6, 600}}));
  EXPECT_EQ(loop.now(), TimePoint{} + milliseconds(40));
}

}  // namespace
}  // namespace deltacast::sim
