// A sharded group over real sockets on loopback: four trainer ranks, each a Producer of the
// pieces it owns (row, column and flat shards), publishing by training step; three rollout
// processes with their own layouts (TP2 rank 0, TP2 rank 1, TP1 with fused qkv_proj and
// gate_up_proj), each a GroupConsumer. After every step every process holds exactly its views of
// the logical model; a rank that goes away mid-version leaves every process at a whole version,
// and when it comes back (a new producer, a full version) the group goes on. Bad layouts are
// refused naming the tensor.
#include "broadcast/engine/group/group_consumer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "broadcast/engine/producer.h"
#include "support/test_tensors.h"
#include "support/test_trust.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
using testing::TensorSet;
constexpr milliseconds kWait{20000};

std::vector<Endpoint> loopback_rails() { return {{"127.0.0.1", 0}, {"127.0.0.2", 0}}; }

std::vector<TensorSpec> logical_tensors() {
  return {{"q", DType::kBF16, {256, 192}},    {"k", DType::kBF16, {128, 192}},     {"v", DType::kBF16, {128, 192}},
          {"o", DType::kBF16, {192, 256}},    {"gate", DType::kBF16, {384, 192}},  {"up", DType::kBF16, {384, 192}},
          {"down", DType::kBF16, {192, 384}}, {"embed", DType::kBF16, {800, 192}}, {"norm", DType::kF32, {192}}};
}

// Trainer rank r of 4: rows of q, k, v, gate, up and down, o by columns, an uneven flat range of
// embed, norm on rank 0.
std::vector<LocalTensorSpec> trainer_rank(uint64_t r) {
  const uint64_t flat_cuts[] = {0, 20000, 70000, 101000, 800 * 192};
  const auto rows = [&](const char* t, uint64_t size) { return PieceSpec{t, false, 0, size / 4 * r, size / 4 * (r + 1)}; };
  std::vector<LocalTensorSpec> pieces = {
      {"q", {rows("q", 256)}},          {"k", {rows("k", 128)}},
      {"v", {rows("v", 128)}},          {"o", {{"o", false, 1, 64 * r, 64 * (r + 1)}}},
      {"gate", {rows("gate", 384)}},    {"up", {rows("up", 384)}},
      {"down", {rows("down", 192)}},    {"embed", {{"embed", true, 0, flat_cuts[r], flat_cuts[r + 1]}}}};
  if (r == 0) pieces.push_back({"norm", {{"norm", false, 0, 0, 192}}});
  return pieces;
}

// An inference engine's TP rank r of n.
std::vector<LocalTensorSpec> rollout_rank(uint64_t r, uint64_t n) {
  const auto rows = [&](const char* t, uint64_t size) { return PieceSpec{t, false, 0, size / n * r, size / n * (r + 1)}; };
  const auto cols = [&](const char* t, uint64_t size) { return PieceSpec{t, false, 1, size / n * r, size / n * (r + 1)}; };
  return {{"qkv_proj", {rows("q", 256), rows("k", 128), rows("v", 128)}},
          {"o_proj", {cols("o", 256)}},
          {"gate_up_proj", {rows("gate", 384), rows("up", 384)}},
          {"down_proj", {cols("down", 384)}},
          {"embed_tokens", {rows("embed", 800)}},
          {"norm", {{"norm", false, 0, 0, 192}}}};
}

// The tensors of `layout`, filled from the logical ones through its runs.
void gather(const Layout& layout, const TensorSet& logical, TensorSet& local) {
  gather_views(layout, logical.views(), local.views());
}

Layout resolved(const std::vector<LocalTensorSpec>& locals) {
  auto l = Layout::resolve(logical_tensors(), locals);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return std::move(l).value();
}

// A trainer rank: its pieces of the model and the producer publishing them.
struct Rank {
  Layout layout;
  Manifest manifest;
  std::unique_ptr<TensorSet> tensors;
  std::unique_ptr<Producer> producer;
  Endpoint address{"127.0.0.1", 0};
  std::optional<GroupSeatOptions> seat;  // a rank that registers with the group's coordinator

  explicit Rank(uint64_t r) : layout(resolved(trainer_rank(r))), manifest(Manifest::create(layout.local_specs()).value()) {
    tensors = std::make_unique<TensorSet>(manifest);
  }
  void start() {
    ProducerOptions o;
    o.listen = address;
    o.trust = testing::test_trust(0x5eed);
    o.rails = loopback_rails();
    o.codec.threads = 1;
    o.round.stall_timeout = milliseconds(5000);
    o.group = seat;
    auto views = tensors->views();
    auto p = Producer::create(manifest, std::vector<TensorView>(views.begin(), views.end()), o);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    producer = std::move(p).value();
    address = producer->address();  // a restarted rank listens where the first one did
  }
};

// A rollout process: its tensors (guarded) and its group consumer.
struct Process {
  Layout layout;
  std::unique_ptr<TensorSet> tensors;
  std::unique_ptr<GroupConsumer> consumer;

  Process(uint64_t r, uint64_t n, const std::vector<Rank>& ranks) : layout(resolved(rollout_rank(r, n))) {
    tensors = std::make_unique<TensorSet>(Manifest::create(layout.local_specs()).value());
    std::vector<GroupRank> group;
    for (size_t k = 0; k < ranks.size(); ++k) group.push_back({trainer_rank(k), {ranks[k].address}, nullptr});
    keep(GroupConsumer::create(logical_tensors(), rollout_rank(r, n), views(), group, options(r, n)));
  }
  // One that knows only where the group's coordinator is.
  Process(uint64_t r, uint64_t n, const Endpoint& coordinator) : layout(resolved(rollout_rank(r, n))) {
    tensors = std::make_unique<TensorSet>(Manifest::create(layout.local_specs()).value());
    const auto logical = logical_tensors();
    keep(GroupConsumer::find({coordinator}, rollout_rank(r, n), views(), options(r, n), kWait, &logical));
  }
  std::vector<TensorView> views() const {
    auto v = tensors->views();
    return std::vector<TensorView>(v.begin(), v.end());
  }
  static ConsumerOptions options(uint64_t r, uint64_t n) {
    ConsumerOptions o;
    o.trust = testing::test_trust(0x5eed);
    o.rails = loopback_rails();
    o.name = fmt::format("tp{}of{}", r, n);
    o.threads = 1;
    o.reconnect_min = milliseconds(50);
    o.reconnect_max = milliseconds(200);
    return o;
  }
  void keep(Result<std::unique_ptr<GroupConsumer>> c) {
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) consumer = std::move(c).value();
  }
  // Exactly its views of `model`, and nothing written outside its tensors.
  bool holds(const TensorSet& model) const {
    TensorSet want(Manifest::create(layout.local_specs()).value());
    gather(layout, model, want);
    std::shared_lock<std::shared_mutex> reading(consumer->tensors_mutex());
    return tensors->same_bits(want) && tensors->guards_intact();
  }
};

void step_model(TensorSet& model, double density, std::mt19937_64& rng) {
  for (auto& t : model.tensors) {
    const auto n = static_cast<uint64_t>(density * static_cast<double>(t.view().numel));
    testing::apply_random_changes(t, std::min(std::max<uint64_t>(n, 1), t.view().numel), rng);
  }
}

// The logical model, random bits.
TensorSet random_model(std::mt19937_64& rng) {
  TensorSet model(Manifest::create(logical_tensors()).value());
  testing::fill_random_bits(model, rng);
  return model;
}

// Ranks `which` publish their pieces of `model` as version v.
void publish(std::vector<Rank>& ranks, const TensorSet& model, uint64_t v, bool full, const std::vector<size_t>& which) {
  for (size_t k : which) {
    gather(ranks[k].layout, model, *ranks[k].tensors);
    auto published = ranks[k].producer->publish(full, v);
    ASSERT_TRUE(published.ok()) << "rank " << k << ": " << published.status().to_string();
    ASSERT_EQ(*published, v);
  }
}

// The four trainer ranks, each a producer of its pieces on loopback.
void start_ranks(std::vector<Rank>& ranks) {
  for (uint64_t r = 0; r < 4; ++r) ranks.emplace_back(r);
  for (auto& rank : ranks) ASSERT_NO_FATAL_FAILURE(rank.start());
}

TEST(Group, FourTrainerRanksToThreeRolloutLayoutsThroughARankRestart) {
  const Manifest logical = Manifest::create(logical_tensors()).value();
  std::mt19937_64 rng(51);
  TensorSet model = random_model(rng);
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(start_ranks(ranks));
  std::vector<std::unique_ptr<Process>> processes;
  for (auto [r, n] : {std::pair<uint64_t, uint64_t>{0, 2}, {1, 2}, {0, 1}}) {
    processes.push_back(std::make_unique<Process>(r, n, ranks));
    ASSERT_TRUE(processes.back()->consumer);
  }
  for (auto& p : processes) ASSERT_TRUE(p->consumer->start(kWait).ok());
  // TP2 processes take pieces from the ranks they overlap; TP1 from all four.
  EXPECT_EQ(processes[2]->consumer->state().ranks, (std::vector<uint32_t>{0, 1, 2, 3}));
  // Every rank publishes step v as version v.
  const auto publish_all = [&](uint64_t v, bool full, std::vector<size_t> which = {0, 1, 2, 3}) {
    publish(ranks, model, v, full, which);
  };
  const auto members = [&](size_t k) {
    size_t n = 0;
    for (auto& p : processes) {
      const auto taken = p->consumer->state().ranks;
      n += static_cast<size_t>(std::count(taken.begin(), taken.end(), k));
    }
    return n;
  };
  for (size_t k = 0; k < ranks.size(); ++k) ASSERT_TRUE(ranks[k].producer->wait_members(members(k), kWait).ok());

  const double densities[] = {0, 0.01, 0.002, 0.05, 0.01};  // step 1: the first (full) version
  uint64_t v = 0;
  for (double density : densities) {
    ++v;
    step_model(model, density, rng);
    ASSERT_NO_FATAL_FAILURE(publish_all(v, v == 1));
    for (auto& p : processes) {
      ASSERT_TRUE(p->consumer->wait_version(v, kWait).ok()) << p->consumer->wait_version(v, milliseconds(0)).to_string();
      EXPECT_TRUE(p->holds(model)) << "version " << v;
    }
    // Routing by need: rank 0 owns rows 0-63 of q and the first quarter of most tensors. TP2 rank
    // 1 holds none of that but its columns of down_proj and the norm: it is sent a small part of
    // rank 0's version (the full one included); TP1 holds everything and is sent all of it.
    ASSERT_TRUE(ranks[0].producer->wait(v, kWait).ok());
    const auto report = ranks[0].producer->report(v);
    ASSERT_TRUE(report && report->done);
    const uint64_t whole = report->stats.wire_bytes;
    EXPECT_LT(report->bytes_to.at("tp1of2.r0"), whole / 2) << "version " << v;
    EXPECT_GT(report->bytes_to.at("tp0of1.r0"), whole * 95 / 100) << "version " << v;
    if (v > 1) {
      EXPECT_LE(report->bytes_to.at("tp0of1.r0"), whole + 4096) << "version " << v;
    }
  }

  // Rank 2 dies as it publishes step 6: the others publish it too. No process may expose a mix:
  // each holds a whole version, 5 or (if rank 2's part got everywhere first) 6.
  TensorSet before(logical);
  before.copy_from(model);
  ++v;
  step_model(model, 0.01, rng);
  ASSERT_NO_FATAL_FAILURE(publish_all(v, false, {2}));
  ranks[2].producer.reset();
  ASSERT_NO_FATAL_FAILURE(publish_all(v, false, {0, 1, 3}));
  // The other ranks' rounds end once their parts are staged everywhere (the processes defer their
  // commits to the group): no round waits out its stall limit, nobody is counted as failed.
  for (size_t k : {0, 1, 3}) {
    bool done = false;
    for (int i = 0; i < 150 && !done; ++i) {
      const auto report = ranks[k].producer->report(v);
      done = report && report->done;
      if (!done) std::this_thread::sleep_for(milliseconds(10));
    }
    ASSERT_TRUE(done) << "rank " << k << "'s round of version " << v << " did not end within 1.5 s";
    EXPECT_EQ(ranks[k].producer->report(v)->failed, 0u) << "rank " << k;
  }
  std::this_thread::sleep_for(milliseconds(500));
  for (auto& p : processes) {
    const uint64_t held = p->consumer->version();
    ASSERT_TRUE(held == v - 1 || held == v) << held;
    EXPECT_TRUE(p->holds(held == v ? model : before)) << "a process exposes a mix of versions " << v - 1 << " and " << v;
  }

  // Rank 2 comes back (a new producer where the old one listened) and goes on at step 7 with a
  // full version of its pieces; the other ranks send deltas. Everyone reaches 7, then 8.
  ASSERT_NO_FATAL_FAILURE(ranks[2].start());
  ASSERT_TRUE(ranks[2].producer->wait_members(members(2), kWait).ok());
  for (int more = 0; more < 2; ++more) {
    ++v;
    step_model(model, 0.02, rng);
    ASSERT_NO_FATAL_FAILURE(publish_all(v, false, {0, 1, 3}));
    ASSERT_NO_FATAL_FAILURE(publish_all(v, more == 0, {2}));
    for (auto& p : processes) {
      ASSERT_TRUE(p->consumer->wait_version(v, kWait).ok()) << p->consumer->wait_version(v, milliseconds(0)).to_string();
      EXPECT_TRUE(p->holds(model)) << "version " << v;
    }
  }

  // Rank 1 dies right after its part of the next version reached everyone: the group commits it
  // once the others publish. The restarted rank sends that version again, in full (it cannot know
  // it got through); every process takes it again, so the rank's wait ends, and all go on.
  ++v;
  step_model(model, 0.01, rng);
  ASSERT_NO_FATAL_FAILURE(publish_all(v, false, {1}));
  for (int i = 0; i < 500 && !(ranks[1].producer->report(v) && ranks[1].producer->report(v)->done); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(ranks[1].producer->report(v)->done);
  ranks[1].producer.reset();
  ASSERT_NO_FATAL_FAILURE(publish_all(v, false, {0, 2, 3}));
  for (auto& p : processes) {
    ASSERT_TRUE(p->consumer->wait_version(v, kWait).ok()) << p->consumer->wait_version(v, milliseconds(0)).to_string();
    EXPECT_TRUE(p->holds(model)) << "version " << v;
  }
  ASSERT_NO_FATAL_FAILURE(ranks[1].start());
  ASSERT_TRUE(ranks[1].producer->wait_members(members(1), kWait).ok());
  ASSERT_NO_FATAL_FAILURE(publish_all(v, true, {1}));
  EXPECT_TRUE(ranks[1].producer->wait(v, kWait).ok()) << "the version sent again was never committed";
  ++v;
  step_model(model, 0.02, rng);
  ASSERT_NO_FATAL_FAILURE(publish_all(v, false));
  for (auto& p : processes) {
    ASSERT_TRUE(p->consumer->wait_version(v, kWait).ok()) << p->consumer->wait_version(v, milliseconds(0)).to_string();
    EXPECT_TRUE(p->holds(model)) << "version " << v;
  }
  for (auto& p : processes) p->consumer->close();
}

// The ranks join their group's coordinator (rank 0 hosts it); a rollout process knows only its
// address, finds the group there, and finds a rank that restarted at another port.
TEST(Group, RolloutProcessesFindTheGroupAtItsCoordinatorAndARankThatMoved) {
  std::mt19937_64 rng(52);
  TensorSet model = random_model(rng);
  std::vector<Rank> ranks;
  GroupSeatOptions seat;
  seat.world = 4;
  seat.logical = logical_tensors();
  seat.register_every = milliseconds(100);
  seat.coordinator = {{"127.0.0.1", 0}};
  for (uint32_t r = 0; r < 4; ++r) {
    ranks.emplace_back(r);
    ranks[r].seat = seat;
    ranks[r].seat->rank = r;
    ranks[r].seat->pieces = trainer_rank(r);
    ranks[r].seat->host = r == 0;
    ASSERT_NO_FATAL_FAILURE(ranks[r].start());
    if (r == 0) seat.coordinator = {ranks[0].producer->group_coordinator().value()};
  }
  for (auto& rank : ranks) ASSERT_TRUE(rank.producer->wait_registered(kWait).ok());
  Process tp1(0, 1, seat.coordinator[0]);
  ASSERT_TRUE(tp1.consumer);
  ASSERT_TRUE(tp1.consumer->start(kWait).ok());
  for (auto& rank : ranks) ASSERT_TRUE(rank.producer->wait_members(1, kWait).ok());
  for (uint64_t v = 1; v <= 2; ++v) {
    step_model(model, 0.01, rng);
    ASSERT_NO_FATAL_FAILURE(publish(ranks, model, v, v == 1, {0, 1, 2, 3}));
    ASSERT_TRUE(tp1.consumer->wait_version(v, kWait).ok()) << tp1.consumer->state().last_error.to_string();
    EXPECT_TRUE(tp1.holds(model)) << "version " << v;
  }
  // Rank 3 restarts on another port: it registers there, and the process finds it.
  const Endpoint old_address = ranks[3].address;
  ranks[3].producer.reset();
  ranks[3].address = Endpoint{"127.0.0.1", 0};
  ASSERT_NO_FATAL_FAILURE(ranks[3].start());
  ASSERT_NE(ranks[3].address.port, old_address.port);
  ASSERT_TRUE(ranks[3].producer->wait_registered(kWait).ok());
  ASSERT_TRUE(ranks[3].producer->wait_members(1, kWait).ok()) << "the rollout process did not find the moved rank";
  step_model(model, 0.01, rng);
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 3, false, {0, 1, 2}));
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 3, true, {3}));
  ASSERT_TRUE(tp1.consumer->wait_version(3, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  EXPECT_TRUE(tp1.holds(model));
  tp1.consumer->close();

  // A process that expects other tensors than the group's is told which; a rank whose tensors are
  // not its pieces is refused naming the tensor.
  auto other = logical_tensors();
  other[0].shape = {256, 128};
  TensorSet mine(Manifest::create(resolved(rollout_rank(0, 1)).local_specs()).value());
  auto v = mine.views();
  const std::vector<TensorView> views(v.begin(), v.end());
  auto mismatched = GroupConsumer::find(seat.coordinator, rollout_rank(0, 1), views, Process::options(0, 1),
                                        milliseconds(2000), &other);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("'q'"), std::string::npos) << mismatched.status().to_string();
  auto astray = GroupConsumer::find({ranks[1].address}, rollout_rank(0, 1), views, Process::options(0, 1),
                                    milliseconds(2000));
  ASSERT_FALSE(astray.ok());
  EXPECT_NE(astray.status().message().find("not the group's coordinator"), std::string::npos) << astray.status().to_string();
  Rank impostor(1);
  impostor.seat = seat;
  impostor.seat->rank = 1;
  impostor.seat->pieces = trainer_rank(2);
  ProducerOptions o;
  o.group = impostor.seat;
  auto iv = impostor.tensors->views();
  auto refused = Producer::create(impostor.manifest, std::vector<TensorView>(iv.begin(), iv.end()), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("its piece of the group"), std::string::npos) << refused.status().to_string();
}

// Polls `ready` for up to kWait.
template <typename Ready>
bool eventually(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// An inference engine that takes new weights only when it asks: with a commit limit, versions
// stay staged until the limit reaches them, and only the asked version lands (not a newer one).
TEST(Group, ACommitLimitHoldsVersionsUntilAsked) {
  const Manifest logical = Manifest::create(logical_tensors()).value();
  std::mt19937_64 rng(53);
  TensorSet model = random_model(rng);
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(start_ranks(ranks));
  Process tp1(0, 1, ranks);
  ASSERT_TRUE(tp1.consumer);
  tp1.consumer->set_commit_limit(0);
  ASSERT_TRUE(tp1.consumer->start(kWait).ok());
  for (auto& rank : ranks) ASSERT_TRUE(rank.producer->wait_members(1, kWait).ok());

  TensorSet first(logical);
  first.copy_from(model);
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 1, true, {0, 1, 2, 3}));
  EXPECT_FALSE(tp1.consumer->wait_version(1, milliseconds(500)).ok()) << "committed above the limit";
  EXPECT_EQ(tp1.consumer->version(), 0u);
  // Staged and verified, not written: what an engine asks every worker before any of them writes.
  EXPECT_TRUE(eventually([&] { return tp1.consumer->staged(1); })) << "version 1 never staged";
  EXPECT_FALSE(tp1.consumer->staged(2));
  EXPECT_EQ(tp1.consumer->version(), 0u);
  tp1.consumer->set_commit_limit(1);
  ASSERT_TRUE(tp1.consumer->wait_version(1, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  EXPECT_TRUE(tp1.holds(first));

  // Versions 2 and 3 both staged; the limit at 2 lands 2 only.
  step_model(model, 0.01, rng);
  TensorSet second(logical);
  second.copy_from(model);
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 2, false, {0, 1, 2, 3}));
  step_model(model, 0.01, rng);
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 3, false, {0, 1, 2, 3}));
  EXPECT_FALSE(tp1.consumer->wait_version(2, milliseconds(300)).ok());
  EXPECT_TRUE(eventually([&] { return tp1.consumer->staged(3); })) << "version 3 never staged";
  EXPECT_TRUE(tp1.consumer->staged(1));  // held
  EXPECT_FALSE(tp1.consumer->staged(4));
  EXPECT_EQ(tp1.consumer->version(), 1u);
  tp1.consumer->set_commit_limit(2);
  ASSERT_TRUE(tp1.consumer->wait_version(2, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(tp1.consumer->version(), 2u);
  EXPECT_TRUE(tp1.holds(second));
  tp1.consumer->set_commit_limit(UINT64_MAX);
  ASSERT_TRUE(tp1.consumer->wait_version(3, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  EXPECT_TRUE(tp1.holds(model));
}

// A process whose layout holds every element of a rank (TP1: q, k and v fused, renamed) is served
// as a consumer without a layout: a late joiner's full version is the rank's image as it is, not
// the version encoded again and cut to a selection. One that holds a part (TP2) keeps its ranges.
TEST(Group, AProcessHoldingEveryElementOfARankGetsItsVersionsUncut) {
  std::mt19937_64 rng(59);
  TensorSet model = random_model(rng);
  std::vector<Rank> ranks;
  ASSERT_NO_FATAL_FAILURE(start_ranks(ranks));
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 1, true, {0, 1, 2, 3}));
  Process tp1(0, 1, ranks), half(0, 2, ranks);
  ASSERT_TRUE(tp1.consumer && half.consumer);
  ASSERT_TRUE(tp1.consumer->start(kWait).ok());
  ASSERT_TRUE(half.consumer->start(kWait).ok());
  ASSERT_TRUE(tp1.consumer->wait_version(1, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  ASSERT_TRUE(half.consumer->wait_version(1, kWait).ok()) << half.consumer->state().last_error.to_string();
  EXPECT_TRUE(tp1.holds(model));
  EXPECT_TRUE(half.holds(model));
  for (size_t k = 0; k < ranks.size(); ++k) {
    const ProducerStats stats = ranks[k].producer->stats();
    ASSERT_EQ(stats.members.size(), 2u) << "rank " << k;
    int seen = 0;
    for (const MemberRecord& m : stats.members) {  // named by process, then ".r<rank>"
      if (m.name.starts_with("tp0of1")) {
        EXPECT_EQ(m.held, nullptr) << "rank " << k << ": a whole holder kept ranges";
        ++seen;
      } else if (m.name.starts_with("tp0of2")) {
        EXPECT_NE(m.held, nullptr) << "rank " << k << ": a part holder lost its ranges";
        ++seen;
      }
    }
    EXPECT_EQ(seen, 2) << "rank " << k;
  }
  // A delta after: both exact.
  step_model(model, 0.01, rng);
  ASSERT_NO_FATAL_FAILURE(publish(ranks, model, 2, false, {0, 1, 2, 3}));
  ASSERT_TRUE(tp1.consumer->wait_version(2, kWait).ok()) << tp1.consumer->state().last_error.to_string();
  ASSERT_TRUE(half.consumer->wait_version(2, kWait).ok()) << half.consumer->state().last_error.to_string();
  EXPECT_TRUE(tp1.holds(model));
  EXPECT_TRUE(half.holds(model));
}

TEST(Group, BadLayoutsAreRefusedNamingTheTensor) {
  const auto specs = logical_tensors();
  const Manifest local = Manifest::create(resolved(rollout_rank(0, 2)).local_specs()).value();
  TensorSet tensors(local);
  auto views = tensors.views();
  const std::vector<TensorView> given(views.begin(), views.end());
  std::vector<GroupRank> ranks;
  for (uint64_t r = 0; r < 4; ++r) ranks.push_back({trainer_rank(r), {{"127.0.0.1", 1}}, nullptr});
  ConsumerOptions o;
  o.trust = testing::test_trust(0x5eed);
  o.rails = loopback_rails();
  const auto refused = [&](std::vector<LocalTensorSpec> layout, std::vector<GroupRank> group, const std::string& says) {
    auto c = GroupConsumer::create(specs, std::move(layout), given, std::move(group), o);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().to_string();
  };
  // Ranks that overlap, or leave a gap.
  auto overlap = ranks;
  overlap[1].pieces[0] = {"q", {{"q", false, 0, 32, 128}}};
  refused(rollout_rank(0, 2), overlap, "'q'");
  auto gap = ranks;
  gap[3].pieces.pop_back();  // rank 3's embed range
  refused(rollout_rank(0, 2), gap, "'embed'");
  // A view past the tensor's end, a fused view of different dtypes, a tensor the group lacks.
  auto past = rollout_rank(0, 2);
  past[1].pieces[0].end = 300;
  refused(past, ranks, "o_proj");
  auto mixed = rollout_rank(0, 2);
  mixed[0].pieces.push_back({"norm", false, 0, 0, 1});
  refused(mixed, ranks, "qkv_proj");
  auto unknown = rollout_rank(0, 2);
  unknown[4].pieces[0].tensor = "lm_head";
  refused(unknown, ranks, "lm_head");
  // Tensors that do not match the layout, and rails with fixed ports.
  auto wrong = given;
  wrong[0].numel -= 1;
  auto c = GroupConsumer::create(specs, rollout_rank(0, 2), wrong, ranks, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("qkv_proj"), std::string::npos) << c.status().to_string();
  ConsumerOptions fixed = o;
  fixed.rails = {{"127.0.0.1", 7000}};
  EXPECT_FALSE(GroupConsumer::create(specs, rollout_rank(0, 2), given, ranks, fixed).ok());
}

}  // namespace
}  // namespace deltacast
