// M trainer ranks -> N rollout layouts, in one process: each rank encodes only the pieces it owns
// (in its own coordinates), each rollout process applies every rank's version through the
// composition of the rank's layout with its own (core/layout.h), and ends holding its views of
// the logical tensors after every step, bit for bit. A rank whose pieces a process does not hold
// is not needed by it at all. Routed: with chunks cut at the processes' edges, each process gets
// only the chunks it holds elements of (sparse/version_select.h), exactly its share, full
// versions included.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "sparse/remapped_apply.h"
#include "sparse/version_select.h"
#include "support/codec_harness.h"

namespace deltacast {
namespace {

using testing::TensorSet;

// A small transformer block: what the trainer shards and the rollout side fuses.
std::vector<TensorSpec> logical_tensors() {
  return {{"q", DType::kBF16, {64, 48}},     {"k", DType::kBF16, {32, 48}},     {"v", DType::kBF16, {32, 48}},
          {"o", DType::kBF16, {48, 64}},     {"gate", DType::kBF16, {96, 48}},  {"up", DType::kBF16, {96, 48}},
          {"down", DType::kBF16, {48, 96}},  {"embed", DType::kBF16, {200, 48}}, {"norm", DType::kF32, {48}}};
}

// Trainer rank r of 4: rows of q, k, v, gate, up (column-parallel weights split by output rows),
// o by columns, down by rows, an uneven FSDP-style flat range of embed, norm on rank 0.
std::vector<LocalTensorSpec> trainer_rank(uint64_t r) {
  const uint64_t flat_cuts[] = {0, 1000, 4000, 6500, 9600};
  std::vector<LocalTensorSpec> pieces = {
      {"q", {{"q", false, 0, 16 * r, 16 * (r + 1)}}},      {"k", {{"k", false, 0, 8 * r, 8 * (r + 1)}}},
      {"v", {{"v", false, 0, 8 * r, 8 * (r + 1)}}},         {"o", {{"o", false, 1, 16 * r, 16 * (r + 1)}}},
      {"gate", {{"gate", false, 0, 24 * r, 24 * (r + 1)}}}, {"up", {{"up", false, 0, 24 * r, 24 * (r + 1)}}},
      {"down", {{"down", false, 0, 12 * r, 12 * (r + 1)}}}, {"embed", {{"embed", true, 0, flat_cuts[r], flat_cuts[r + 1]}}}};
  if (r == 0) pieces.push_back({"norm", {{"norm", false, 0, 0, 48}}});
  return pieces;
}

// An inference engine's TP rank r of n: fused qkv_proj and gate_up_proj of its rows, o_proj and
// down_proj by columns, embed by rows, norm whole.
std::vector<LocalTensorSpec> rollout_rank(uint64_t r, uint64_t n) {
  const auto rows = [&](const char* t, uint64_t size) { return PieceSpec{t, false, 0, size / n * r, size / n * (r + 1)}; };
  const auto cols = [&](const char* t, uint64_t size) { return PieceSpec{t, false, 1, size / n * r, size / n * (r + 1)}; };
  return {{"qkv_proj", {rows("q", 64), rows("k", 32), rows("v", 32)}},
          {"o_proj", {cols("o", 64)}},
          {"gate_up_proj", {rows("gate", 96), rows("up", 96)}},
          {"down_proj", {cols("down", 96)}},
          {"embed_tokens", {rows("embed", 200)}},
          {"norm", {{"norm", false, 0, 0, 48}}}};
}

// The local tensors of `layout`, filled from the logical tensors through its runs.
void gather(const Layout& layout, const TensorSet& logical, TensorSet& local) {
  gather_views(layout, logical.views(), local.views());
}

// Four trainer ranks and three rollout processes (TP2 rank 0, TP2 rank 1, TP1), with what each
// rank's tensors mean to each process.
struct Group {
  std::vector<TensorSpec> specs = logical_tensors();
  Manifest logical = testing::make_manifest(specs);
  std::vector<Layout> ranks, views;
  std::vector<Manifest> rank_manifests;
  std::vector<std::vector<Layout>> routes;  // routes[process][rank]
  // Per rank, where its chunks must be cut so that none is partly held by any process.
  std::vector<std::vector<std::vector<uint64_t>>> cuts;

  Group() {
    for (uint64_t r = 0; r < 4; ++r) ranks.push_back(resolved(trainer_rank(r)));
    EXPECT_TRUE(check_tiling(specs, ranks).ok());
    for (auto [r, n] : {std::pair<uint64_t, uint64_t>{0, 2}, {1, 2}, {0, 1}}) views.push_back(resolved(rollout_rank(r, n)));
    for (const Layout& l : ranks) rank_manifests.push_back(testing::make_manifest(l.local_specs()));
    routes.resize(views.size());
    for (size_t c = 0; c < views.size(); ++c) {
      for (const Layout& rank : ranks) routes[c].push_back(std::move(Layout::compose(rank, views[c])).value());
    }
    cuts.resize(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      cuts[r].resize(rank_manifests[r].size());
      for (size_t c = 0; c < views.size(); ++c) {
        const auto edges = HeldRanges::of(routes[c][r]).edges(rank_manifests[r].size());
        for (size_t t = 0; t < edges.size(); ++t) cuts[r][t].insert(cuts[r][t].end(), edges[t].begin(), edges[t].end());
      }
    }
  }
  // Every rollout process's tensors, holding its views of `model`.
  std::vector<TensorSet> processes_holding(const TensorSet& model) const {
    std::vector<TensorSet> out;
    for (const Layout& v : views) {
      out.emplace_back(testing::make_manifest(v.local_specs()));
      gather(v, model, out.back());
    }
    return out;
  }
  Layout resolved(const std::vector<LocalTensorSpec>& locals) {
    auto l = Layout::resolve(specs, locals);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return std::move(l).value();
  }
};

CodecOptions small_chunks() {
  CodecOptions options;
  options.chunk_bytes = 512;  // chunks much smaller than a piece: many straddle the views' edges
  options.bucket_bytes = 4096;
  options.threads = 1;
  return options;
}

// Changes `density` of every logical tensor's elements.
void step_model(TensorSet& next, const TensorSet& current, double density, std::mt19937_64& rng) {
  next.copy_from(current);
  for (auto& t : next.tensors) {
    const auto n = static_cast<uint64_t>(density * static_cast<double>(t.view().numel));
    testing::apply_random_changes(t, std::min(n, t.view().numel), rng);
  }
}

TEST(ReshardedVersions, FourTrainerRanksToThreeRolloutLayoutsEveryStepExact) {
  Group g;
  std::mt19937_64 rng(41);
  TensorSet current(g.logical), next(g.logical);
  testing::fill_random_bits(current, rng);
  std::vector<TensorSet> processes = g.processes_holding(current);
  ThreadPool pool(2);
  uint64_t needed_chunks = 0, skipped_chunks = 0;
  const double densities[] = {0.01, 0.002, 0.05, 1.0, 0.01, 0.3};
  for (uint64_t step = 0; step < std::size(densities); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step << ", density " << densities[step]);
    step_model(next, current, densities[step], rng);
    for (size_t r = 0; r < g.ranks.size(); ++r) {
      TensorSet rank_base(g.rank_manifests[r]), rank_next(g.rank_manifests[r]);
      gather(g.ranks[r], current, rank_base);
      gather(g.ranks[r], next, rank_next);
      auto delta = testing::encode_delta(g.rank_manifests[r], small_chunks(), rank_base, rank_next, step + 1, step + 2);
      ASSERT_TRUE(delta.ok()) << delta.status().to_string();
      DeltaApplier applier(g.rank_manifests[r], 1);
      auto version = applier.verify(testing::bucket_spans(delta->buckets), step + 1);
      ASSERT_TRUE(version.ok()) << version.status().to_string();
      for (size_t c = 0; c < g.views.size(); ++c) {
        for (const ChunkBody& chunk : version->chunks) {
          const uint64_t start = chunk.header.element_start;
          const bool needed = !g.routes[c][r].intersect(chunk.header.tensor_index, start, start + chunk.header.element_count).empty();
          (needed ? needed_chunks : skipped_chunks) += 1;
        }
        Status s = apply_remapped(*version, g.rank_manifests[r], g.routes[c][r], processes[c].views(), pool);
        ASSERT_TRUE(s.ok()) << "rank " << r << " -> process " << c << ": " << s.to_string();
      }
    }
    for (size_t c = 0; c < g.views.size(); ++c) {
      TensorSet want(testing::make_manifest(g.views[c].local_specs()));
      gather(g.views[c], next, want);
      EXPECT_TRUE(processes[c].same_bits(want)) << "process " << c;
      EXPECT_TRUE(processes[c].guards_intact()) << "process " << c;
    }
    current.copy_from(next);
  }
  // The TP2 processes hold half of most tensors: many chunks are not theirs.
  EXPECT_GT(skipped_chunks, needed_chunks / 4) << needed_chunks << " needed, " << skipped_chunks << " skipped";
}

// Chunks cut at every process's edges: each is wholly held by a process or not at all, so the
// selected version carries exactly the process's share of the rank's chunk bytes, and applies.
TEST(ReshardedVersions, RoutedVersionsCarryEachProcessItsShareAndApplyExactly) {
  Group g;
  std::mt19937_64 rng(43);
  TensorSet current(g.logical), next(g.logical);
  testing::fill_random_bits(current, rng);
  std::vector<TensorSet> processes = g.processes_holding(current);
  ThreadPool pool(2);
  const double densities[] = {0.02, 0.005, 0.4};
  for (uint64_t step = 0; step < std::size(densities); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    step_model(next, current, densities[step], rng);
    std::vector<uint64_t> received(g.views.size(), 0), share(g.views.size(), 0);
    for (size_t r = 0; r < g.ranks.size(); ++r) {
      TensorSet rank_base(g.rank_manifests[r]), rank_next(g.rank_manifests[r]);
      gather(g.ranks[r], current, rank_base);
      gather(g.ranks[r], next, rank_next);
      auto delta = testing::encode_delta(g.rank_manifests[r], small_chunks(), rank_base, rank_next, step + 1, step + 2,
                                         g.cuts[r]);
      ASSERT_TRUE(delta.ok()) << delta.status().to_string();
      DeltaApplier applier(g.rank_manifests[r], 1);
      auto whole = applier.verify(testing::bucket_spans(delta->buckets), step + 1);
      ASSERT_TRUE(whole.ok()) << whole.status().to_string();
      for (size_t c = 0; c < g.views.size(); ++c) {
        const Layout& route = g.routes[c][r];
        // The share: each chunk's stored bytes in proportion to the elements of it the process holds.
        for (const ChunkBody& chunk : whole->chunks) {
          const ChunkHeader& h = chunk.header;
          uint64_t held = 0;
          for (const ElementRun& run : route.intersect(h.tensor_index, h.element_start, h.element_start + h.element_count)) {
            held += run.length;
          }
          ASSERT_TRUE(held == 0 || held == h.element_count) << "a chunk straddles an edge of process " << c;
          if (held != 0) share[c] += h.stored_bytes();
        }
        const HeldRanges held = HeldRanges::of(route);
        auto selected = select_chunks(*delta, g.rank_manifests[r], held, small_chunks(), pool);
        ASSERT_TRUE(selected.ok()) << selected.status().to_string();
        for (const auto& bucket : selected->buckets) received[c] += bucket.size() - BucketHeader::kBytes;
        auto version = applier.verify(testing::bucket_spans(selected->buckets), step + 1, &held);
        ASSERT_TRUE(version.ok()) << version.status().to_string();
        ASSERT_TRUE(apply_remapped(*version, g.rank_manifests[r], route, processes[c].views(), pool).ok());
      }
    }
    for (size_t c = 0; c < g.views.size(); ++c) {
      TensorSet want(testing::make_manifest(g.views[c].local_specs()));
      gather(g.views[c], next, want);
      EXPECT_TRUE(processes[c].same_bits(want)) << "process " << c;
      EXPECT_EQ(received[c], share[c]) << "process " << c << " got chunk bytes beyond its share";
    }
    // The TP2 processes hold about half the model: about half of the chunk bytes each.
    EXPECT_LT(received[0], received[2] * 6 / 10);
    EXPECT_LT(received[1], received[2] * 6 / 10);
    current.copy_from(next);
  }
}

// A full version selected for a process sets everything it holds (from poisoned tensors), and is
// read only with the process's layout: without it it is refused, against a layout that holds more
// it leaves elements unset, named.
TEST(ReshardedVersions, ASelectedFullVersionCoversWhatTheProcessHoldsAndOnlyThat) {
  Group g;
  std::mt19937_64 rng(47);
  TensorSet model(g.logical);
  testing::fill_random_bits(model, rng);
  ThreadPool pool(2);
  TensorSet process(testing::make_manifest(g.views[0].local_specs()));
  for (auto& t : process.tensors) std::memset(t.data(), 0x5a, t.nbytes());
  for (size_t r = 0; r < g.ranks.size(); ++r) {
    TensorSet rank_model(g.rank_manifests[r]);
    gather(g.ranks[r], model, rank_model);
    auto encoder = DeltaEncoder::create(g.rank_manifests[r], small_chunks(), g.cuts[r]);
    ASSERT_TRUE(encoder.ok());
    auto full = encoder->encode_full(rank_model.views(), 7);
    ASSERT_TRUE(full.ok());
    const Layout& route = g.routes[0][r];
    const HeldRanges held = HeldRanges::of(route);
    auto selected = select_chunks(*full, g.rank_manifests[r], held, small_chunks(), pool);
    ASSERT_TRUE(selected.ok());
    DeltaApplier applier(g.rank_manifests[r], 1);
    const auto spans = testing::bucket_spans(selected->buckets);
    auto version = applier.verify(spans, std::nullopt, &held);
    ASSERT_TRUE(version.ok()) << "rank " << r << ": " << version.status().to_string();
    ASSERT_TRUE(apply_remapped(*version, g.rank_manifests[r], route, process.views(), pool).ok());

    auto without = applier.verify(spans, std::nullopt);
    ASSERT_FALSE(without.ok());
    EXPECT_NE(without.status().message().find("read it with that layout"), std::string::npos) << without.status().to_string();
    // TP1 holds everything of every rank; TP2 rank 0's selection does not cover it.
    const HeldRanges everything = HeldRanges::of(g.routes[2][r]);
    auto wider = applier.verify(spans, std::nullopt, &everything);
    ASSERT_FALSE(wider.ok());
    EXPECT_NE(wider.status().message().find("full sync leaves elements"), std::string::npos) << wider.status().to_string();
    EXPECT_NE(wider.status().message().find("tensor '"), std::string::npos);
  }
  TensorSet want(testing::make_manifest(g.views[0].local_specs()));
  gather(g.views[0], model, want);
  EXPECT_TRUE(process.same_bits(want));
}

TEST(ReshardedVersions, ChunksAreCutAtEveryEdgeAndStillCoverEachTensorOnce) {
  const Manifest manifest = testing::make_manifest({{"a", DType::kBF16, {1000}}, {"b", DType::kF32, {300}}, {"e", DType::kBF16, {0}}});
  CodecOptions options;
  options.chunk_bytes = 256;  // 128 bf16 or 64 f32 elements
  const std::vector<std::vector<uint64_t>> cuts = {{500, 130, 130, 0, 1000, 999}, {64, 65}};
  const auto ranges = plan_chunk_ranges(manifest, options, cuts);
  for (uint32_t t = 0; t < 2; ++t) {
    uint64_t at = 0;
    for (const ChunkRange& r : ranges) {
      if (r.tensor_index != t) continue;
      EXPECT_EQ(r.element_start, at) << "tensor " << t;
      EXPECT_LE(r.element_count, chunk_elements(options, manifest[t].dtype));
      for (uint64_t c : cuts[t]) EXPECT_FALSE(r.element_start < c && c < r.element_start + r.element_count) << "cut " << c;
      at += r.element_count;
    }
    EXPECT_EQ(at, manifest[t].numel());
  }
  EXPECT_EQ(plan_chunk_ranges(manifest, options).size(), 8u + 5u);  // without cuts: 1000/128 -> 8, 300/64 -> 5
  EXPECT_FALSE(DeltaEncoder::create(manifest, options, std::vector<std::vector<uint64_t>>(4)).ok());
}

// A process whose view shares nothing with a rank's pieces needs nothing from that rank.
TEST(ReshardedVersions, ARankAProcessDoesNotHoldIsNotNeeded) {
  const auto specs = logical_tensors();
  auto rank3 = Layout::resolve(specs, {{"q", {{"q", false, 0, 48, 64}}}});
  auto tp2_rank0 = Layout::resolve(specs, rollout_rank(0, 2));
  auto tp2_rank1 = Layout::resolve(specs, rollout_rank(1, 2));
  ASSERT_TRUE(rank3.ok() && tp2_rank0.ok() && tp2_rank1.ok());
  EXPECT_TRUE(Layout::compose(*rank3, *tp2_rank0)->runs().empty());
  EXPECT_EQ(Layout::compose(*rank3, *tp2_rank1)->held_elements(0), 16u * 48u);
}

}  // namespace
}  // namespace deltacast
