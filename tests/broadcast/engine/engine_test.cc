// The broadcast engine in one process over loopback: a producer and several
// consumers with real sockets on two rails. Versions must reach everyone bit
// for bit, joins are checked, late joiners and damaged consumers are caught
// up with full syncs, a consumer leaving mid-version does not stop the
// others, and a producer that goes away leaves every consumer's tensors as
// they were. Kills with SIGKILL across namespaces are in tests/netns/.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "support/engine_harness.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
using testing::expect_all_exact;
using testing::TensorSet;
constexpr uint64_t kToken = testing::kEngineToken;
constexpr milliseconds kWait = testing::kEngineWait;

std::vector<Endpoint> loopback_rails() { return {{"127.0.0.1", 0}, {"127.0.0.2", 0}}; }

// A trainer on two loopback rails.
struct Trainer : testing::Trainer {
  explicit Trainer(uint64_t elements) : Trainer(elements, 3e-7, ProducerOptions()) {}
  Trainer(uint64_t elements, double lr, ProducerOptions options)
      : testing::Trainer(elements, lr, with_rails(std::move(options))) {}
  static ProducerOptions with_rails(ProducerOptions options) {
    options.rails = loopback_rails();
    options.round.stall_timeout = milliseconds(5000);
    return options;
  }
};

// A rollout on two loopback rails.
struct Rollout : testing::Rollout {
  Rollout(const Manifest& manifest, Endpoint producer, std::string name, uint64_t token = kToken,
          bool auto_commit = true)
      : testing::Rollout(manifest, producer, options(std::move(name), token, auto_commit)) {}
  static ConsumerOptions options(std::string name, uint64_t token, bool auto_commit) {
    ConsumerOptions o;
    o.trust = testing::engine_trust(token);
    o.rails = loopback_rails();
    o.name = std::move(name);
    o.auto_commit = auto_commit;
    o.reconnect_min = milliseconds(50);
    o.reconnect_max = milliseconds(200);
    return o;
  }
};

TEST(Engine, VersionsReachEveryConsumerBitExact) {
  Trainer trainer(1 << 20);
  std::vector<std::unique_ptr<Rollout>> rollouts;
  for (int i = 0; i < 3; ++i) {
    rollouts.push_back(std::make_unique<Rollout>(trainer.trace->manifest(), trainer.producer->address(),
                                                 fmt::format("r{}", i)));
    ASSERT_TRUE(rollouts.back()->consumer->start(kWait).ok());
  }
  ASSERT_TRUE(trainer.producer->wait_members(3, kWait).ok());
  for (int step = 0; step < 6; ++step) {
    trainer.trace->step();
    auto v = trainer.producer->publish(/*full=*/step == 4);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(*v, static_cast<uint64_t>(step + 1));
    ASSERT_TRUE(trainer.producer->wait(*v, kWait).ok());
    for (auto& r : rollouts) {
      EXPECT_EQ(r->consumer->version(), *v);
      EXPECT_TRUE(r->matches(*trainer.trace)) << "after version " << *v;
    }
    expect_all_exact(*trainer.producer, *v, 3);
    auto report = trainer.producer->report(*v);
    ASSERT_TRUE(report.has_value());
    EXPECT_TRUE(report->done);
    EXPECT_EQ(report->committed, 3u);
    EXPECT_EQ(report->full, step == 0 || step == 4);
    if (!report->full) {
      EXPECT_LT(report->stats.wire_bytes, report->stats.dense_bytes / 10);
    }
  }
}

TEST(Engine, PublishingWhileInFlightQueuesEveryVersionInOrder) {
  Trainer trainer(1 << 20);
  Rollout a(trainer.trace->manifest(), trainer.producer->address(), "a");
  Rollout b(trainer.trace->manifest(), trainer.producer->address(), "b");
  ASSERT_TRUE(a.consumer->start(kWait).ok());
  ASSERT_TRUE(b.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer.producer->wait_members(2, kWait).ok());
  uint64_t last = 0;
  for (int step = 0; step < 5; ++step) {
    trainer.trace->step();
    last = trainer.producer->publish().value();  // no waiting in between
  }
  ASSERT_TRUE(trainer.producer->wait(last, kWait).ok());
  for (uint64_t v = 1; v <= last; ++v) {
    auto report = trainer.producer->report(v);
    ASSERT_TRUE(report && report->done) << v;
    EXPECT_EQ(report->committed, 2u) << "version " << v << " skipped";
  }
  EXPECT_TRUE(a.matches(*trainer.trace));
  EXPECT_TRUE(b.matches(*trainer.trace));
  expect_all_exact(*trainer.producer, last, 2);
}

TEST(Engine, WrongSecretIsRefusedWithAClearError) {
  Trainer trainer(1 << 16);
  Rollout intruder(trainer.trace->manifest(), trainer.producer->address(), "intruder", kToken + 1);
  Status s = intruder.consumer->start(kWait);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.to_string();
  EXPECT_NE(s.message().find("wrong secret"), std::string::npos) << s.message();
  EXPECT_TRUE(intruder.consumer->state().refused);
  EXPECT_TRUE(trainer.producer->stats().members.empty());
}

TEST(Engine, ManifestMismatchNamesTheFirstDifferingTensor) {
  Trainer trainer(1 << 20);
  auto specs = trainer.trace->manifest().tensors();
  ASSERT_GT(specs.size(), 2u);
  specs[2].shape.back() += 1;
  const Manifest other = testing::make_manifest(specs);
  Rollout stranger(other, trainer.producer->address(), "stranger");
  Status s = stranger.consumer->start(kWait);
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
  EXPECT_NE(s.message().find(specs[2].name), std::string::npos) << s.message();
  EXPECT_TRUE(trainer.producer->stats().members.empty());
}

TEST(Engine, LateJoinerGetsAFullSyncThenDeltas) {
  Trainer trainer(1 << 20);
  Rollout early(trainer.trace->manifest(), trainer.producer->address(), "early");
  ASSERT_TRUE(early.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer.producer->wait_members(1, kWait).ok());
  uint64_t v = 0;
  for (int step = 0; step < 3; ++step) {
    trainer.trace->step();
    v = trainer.producer->publish().value();
  }
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
  Rollout late(trainer.trace->manifest(), trainer.producer->address(), "late");
  ASSERT_TRUE(late.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer.producer->wait_members(2, kWait).ok());
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());  // includes the newcomer
  EXPECT_TRUE(late.matches(*trainer.trace));
  trainer.trace->step();
  v = trainer.producer->publish().value();
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
  auto report = trainer.producer->report(v);
  EXPECT_FALSE(report->full);
  EXPECT_EQ(report->committed, 2u);  // the newcomer takes deltas now
  EXPECT_EQ(trainer.producer->stats().full_syncs, 1u);  // its catch-up ran before this round
  EXPECT_TRUE(late.matches(*trainer.trace));
  expect_all_exact(*trainer.producer, v, 2);
}

TEST(Engine, DamagedConsumerIsFoundByCheckAndRepairedByFullSync) {
  Trainer trainer(1 << 20);
  Rollout good(trainer.trace->manifest(), trainer.producer->address(), "good");
  Rollout damaged(trainer.trace->manifest(), trainer.producer->address(), "damaged");
  ASSERT_TRUE(good.consumer->start(kWait).ok());
  ASSERT_TRUE(damaged.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer.producer->wait_members(2, kWait).ok());
  trainer.trace->step();
  uint64_t v = trainer.producer->publish().value();
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
  damaged.tensors->tensors[1].data()[5] ^= 0x40;  // the base is no longer version v
  trainer.trace->step();
  v = trainer.producer->publish().value();
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
  auto check = trainer.producer->check(v, kWait);
  ASSERT_TRUE(check.ok());
  EXPECT_FALSE(check->all_exact());
  // The check marked it: it is re-sent the whole version.
  for (int i = 0; i < 100 && !damaged.matches(*trainer.trace); ++i) std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(damaged.matches(*trainer.trace));
  expect_all_exact(*trainer.producer, v, 2);
}

TEST(Engine, ConsumerLeavingMidVersionDoesNotStopTheOthers) {
  ProducerOptions options;
  options.round.slice_bytes = 64 << 10;  // many slices, so that the version is mid-flight for a while
  Trainer trainer(8 << 20, 3e-7, options);
  std::vector<std::unique_ptr<Rollout>> rollouts;
  for (int i = 0; i < 4; ++i) {
    rollouts.push_back(std::make_unique<Rollout>(trainer.trace->manifest(), trainer.producer->address(),
                                                 fmt::format("r{}", i)));
    ASSERT_TRUE(rollouts.back()->consumer->start(kWait).ok());
  }
  ASSERT_TRUE(trainer.producer->wait_members(4, kWait).ok());
  trainer.trace->step();
  const uint64_t v = trainer.producer->publish().value();  // version 1: a full sync of 16 MiB
  // Leave as soon as some of it arrived: every chain holds this member somewhere.
  for (int i = 0; i < 2000; ++i) {
    auto m = trainer.producer->stats().members;
    if (!m.empty() && std::any_of(m.begin(), m.end(), [](const MemberRecord& r) { return r.arrived > 0; })) break;
    std::this_thread::sleep_for(milliseconds(1));
  }
  rollouts[1]->consumer->close();
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
  for (int i : {0, 2, 3}) EXPECT_TRUE(rollouts[i]->matches(*trainer.trace)) << i;
  auto report = trainer.producer->report(v);
  EXPECT_EQ(report->committed + report->lost, 4u);
  EXPECT_GE(report->committed, 3u);
  expect_all_exact(*trainer.producer, v, 3);
}

TEST(Engine, ProducerGoneConsumersKeepTheirVersionAndRejoinTheNextOne) {
  auto trainer = std::make_unique<Trainer>(1 << 20);
  const Manifest manifest = trainer->trace->manifest();
  Rollout a(manifest, trainer->producer->address(), "a");
  ASSERT_TRUE(a.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer->producer->wait_members(1, kWait).ok());
  trainer->trace->step();
  const uint64_t v = trainer->producer->publish().value();
  ASSERT_TRUE(trainer->producer->wait(v, kWait).ok());
  const uint64_t held_hash = a.consumer->model_hash_now();
  const Endpoint address = trainer->producer->address();
  trainer->producer->close();
  for (int i = 0; i < 100 && a.consumer->state().connected; ++i) std::this_thread::sleep_for(milliseconds(20));
  const ConsumerState lost = a.consumer->state();
  EXPECT_FALSE(lost.connected);
  EXPECT_EQ(lost.version, v);
  EXPECT_EQ(lost.last_error.code(), StatusCode::kUnavailable) << lost.last_error.to_string();
  EXPECT_EQ(a.consumer->model_hash_now(), held_hash);

  // A new producer on the same address: the consumer rejoins and is synced in full.
  ProducerOptions options;
  options.listen = address;
  Trainer second(1 << 20, 1e-6, options);
  ASSERT_TRUE(second.producer->wait_members(1, kWait).ok());
  second.trace->step();
  const uint64_t w = second.producer->publish().value();
  ASSERT_TRUE(second.producer->wait(w, kWait).ok());
  EXPECT_TRUE(a.matches(*second.trace));
  EXPECT_EQ(a.consumer->state().epoch, second.producer->epoch());
}

// Readers of a consumer's tensors hold its tensors_mutex() shared and a commit holds it exclusively,
// so a reader sees one version whole, never part of one and part of the next. Version k fills
// every byte of both tensors with k: a commit seen half-applied shows two different bytes.
TEST(Engine, ReadersUnderTheSharedLockNeverSeeAMixOfTwoVersions) {
  const Manifest m = testing::make_manifest({{"a", DType::kF32, {1 << 21}}, {"b", DType::kBF16, {1 << 21}}});
  TensorSet source(m), target(m);
  const auto fill = [](TensorSet& set, uint8_t byte) {
    for (auto& t : set.tensors) std::memset(t.data(), byte, t.nbytes());
  };
  fill(source, 1);
  ProducerOptions options = Trainer::with_rails(ProducerOptions());
  options.trust = testing::engine_trust();
  auto producer = Producer::create(m, source.views(), options);
  ASSERT_TRUE(producer.ok()) << producer.status().to_string();
  auto consumer = testing::start_consumer(m, target.views(), **producer, "reader");
  ASSERT_TRUE(consumer);
  ASSERT_TRUE((*producer)->wait_members(1, kWait).ok());
  ASSERT_TRUE((*producer)->wait((*producer)->publish().value(), kWait).ok());

  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, mixes{0};
  std::set<uint8_t> seen;
  std::thread reader([&] {
    while (!done) {
      std::shared_lock<std::shared_mutex> lock(consumer->tensors_mutex());
      const uint8_t first = target.tensors[0].data()[0];
      bool whole = true;
      for (const auto& t : target.tensors) {
        const uint8_t* bytes = t.data();
        whole = whole && std::all_of(bytes, bytes + t.nbytes(), [first](uint8_t b) { return b == first; });
      }
      mixes += !whole;
      ++reads;
      seen.insert(first);
    }
  });
  for (uint8_t k = 2; k <= 24; ++k) {
    fill(source, k);
    auto v = (*producer)->publish(/*full=*/k % 4 == 0);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_TRUE((*producer)->wait(*v, kWait).ok());
  }
  done = true;
  reader.join();
  EXPECT_EQ(mixes.load(), 0u) << "of " << reads.load() << " reads under the shared lock";
  EXPECT_GE(seen.size(), 4u) << "the reader saw too few versions to tell: " << reads.load() << " reads";
  EXPECT_TRUE(target.same_bits(source));
  EXPECT_TRUE(target.guards_intact());
  consumer->close();
  (*producer)->close();
}

// A new producer numbers its versions afresh, so a version number means something only with the
// epoch of the producer that sent it. A consumer holding version 3 of one producer joins a new one
// (epoch E), loses it before anything arrived, and rejoins E's successor of the same epoch, which
// has published versions 1-3 of other weights: it must be synced in full, not taken as holding
// that producer's version 3 (a delta on top of it would write other weights without a word).
TEST(Engine, AVersionOfAnEarlierProducerIsNoBaseForTheSameNumberFromANewOne) {
  auto first = std::make_unique<Trainer>(1 << 18);
  const Manifest manifest = first->trace->manifest();
  const Endpoint address = first->producer->address();
  std::mutex mu;
  std::vector<Endpoint> moved_to;  // where the last producer will be (the consumer asks when it cannot connect)
  ConsumerOptions options = Rollout::options("x", kToken, true);
  options.coordinators = {address};
  options.rediscover = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return moved_to;
  };
  testing::Rollout x(manifest, address, options);
  ASSERT_TRUE(x.consumer->start(kWait).ok());
  ASSERT_TRUE(first->producer->wait_members(1, kWait).ok());
  for (int i = 0; i < 3; ++i) {
    first->trace->step();
    ASSERT_TRUE(first->producer->publish().ok());
  }
  ASSERT_TRUE(first->producer->wait(3, kWait).ok());
  const uint64_t first_epoch = first->producer->epoch();
  first.reset();

  ProducerOptions same_epoch;
  same_epoch.epoch = 0x5eed0000000001;
  same_epoch.listen = address;
  auto second = std::make_unique<Trainer>(1 << 18, 1e-6, same_epoch);
  ASSERT_TRUE(second->producer->wait_members(1, kWait).ok());
  // wait_members returns once the producer has the member; the consumer takes the new epoch when
  // it handles the join's answer, which can be a moment later (seen once in CI).
  const auto joined_by = std::chrono::steady_clock::now() + kWait;
  while (x.consumer->state().epoch != same_epoch.epoch && std::chrono::steady_clock::now() < joined_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(x.consumer->state().epoch, same_epoch.epoch);
  EXPECT_EQ(x.consumer->state().held_epoch, first_epoch) << "version 3 is still the first producer's";
  same_epoch.listen = Endpoint{"127.0.0.1", 0};
  Trainer third(1 << 18, 1e-6, same_epoch);
  for (int i = 0; i < 3; ++i) {
    third.trace->step();
    ASSERT_TRUE(third.producer->publish().ok());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    moved_to = {third.producer->address()};
  }
  second.reset();  // before it sent anything
  ASSERT_TRUE(third.producer->wait_members(1, kWait).ok());
  ASSERT_TRUE(third.producer->wait(3, kWait).ok());
  EXPECT_TRUE(x.matches(*third.trace)) << "the first producer's version 3 was taken for the third's";
  expect_all_exact(*third.producer, 3, 1);
  third.trace->step();
  const uint64_t next = third.producer->publish().value();
  ASSERT_TRUE(third.producer->wait(next, kWait).ok());
  EXPECT_TRUE(x.matches(*third.trace));
  const auto held = x.consumer->held_model();
  EXPECT_EQ(held.epoch, same_epoch.epoch);
  EXPECT_EQ(held.version, next);
  EXPECT_EQ(held.hash, x.consumer->model_hash_now());
}

TEST(Engine, PullModeExposesNothingUntilPulled) {
  Trainer trainer(1 << 18);
  Rollout r(trainer.trace->manifest(), trainer.producer->address(), "puller", kToken, /*auto_commit=*/false);
  ASSERT_TRUE(r.consumer->start(kWait).ok());
  ASSERT_TRUE(trainer.producer->wait_members(1, kWait).ok());
  const TensorSet before = [&] {
    TensorSet copy(trainer.trace->manifest());
    copy.copy_from(*r.tensors);
    return copy;
  }();
  trainer.trace->step();
  const uint64_t v = trainer.producer->publish().value();
  EXPECT_FALSE(trainer.producer->wait(v, milliseconds(500)).ok());  // staged, not committed
  EXPECT_TRUE(r.tensors->same_bits(before));
  EXPECT_EQ(r.consumer->version(), 0u);
  auto pulled = r.consumer->pull(kWait);
  ASSERT_TRUE(pulled.ok()) << pulled.status().to_string();
  EXPECT_EQ(*pulled, v);
  EXPECT_TRUE(r.matches(*trainer.trace));
  ASSERT_TRUE(trainer.producer->wait(v, kWait).ok());
}

}  // namespace
}  // namespace deltacast
