// M trainer ranks -> N rollout layouts, in one process: each rank encodes only the pieces it owns
// (in its own coordinates), each rollout process applies every rank's version through the
// composition of the rank's layout with its own (core/layout.h), and ends holding its views of
// the logical tensors after every step, bit for bit. A rank whose pieces a process does not hold
// is not needed by it at all.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "sparse/remapped_apply.h"
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
  for (const ElementRun& r : layout.runs()) {
    const size_t size = dtype_size(local.tensors[r.local_tensor].view().dtype);
    std::memcpy(local.tensors[r.local_tensor].data() + r.local * size, logical.tensors[r.tensor].data() + r.logical * size,
                r.length * size);
  }
}

TEST(ReshardedVersions, FourTrainerRanksToThreeRolloutLayoutsEveryStepExact) {
  const auto specs = logical_tensors();
  const Manifest logical = testing::make_manifest(specs);
  std::vector<Layout> ranks;
  for (uint64_t r = 0; r < 4; ++r) {
    auto l = Layout::resolve(specs, trainer_rank(r));
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    ranks.push_back(std::move(l).value());
  }
  ASSERT_TRUE(check_tiling(specs, ranks).ok());
  std::vector<Layout> views;
  for (auto [r, n] : {std::pair<uint64_t, uint64_t>{0, 2}, {1, 2}, {0, 1}}) {
    auto l = Layout::resolve(specs, rollout_rank(r, n));
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    views.push_back(std::move(l).value());
  }
  std::vector<Manifest> rank_manifests;
  for (const Layout& l : ranks) rank_manifests.push_back(testing::make_manifest(l.local_specs()));
  // What each rank's tensors mean to each rollout process.
  std::vector<std::vector<Layout>> routes(views.size());
  for (size_t c = 0; c < views.size(); ++c) {
    for (const Layout& rank : ranks) routes[c].push_back(std::move(Layout::compose(rank, views[c])).value());
  }

  std::mt19937_64 rng(41);
  TensorSet current(logical), next(logical);
  testing::fill_random_bits(current, rng);
  std::vector<TensorSet> processes;
  for (const Layout& v : views) {
    processes.emplace_back(testing::make_manifest(v.local_specs()));
    gather(v, current, processes.back());
  }
  ThreadPool pool(2);
  uint64_t needed_chunks = 0, skipped_chunks = 0;
  const double densities[] = {0.01, 0.002, 0.05, 1.0, 0.01, 0.3};
  for (uint64_t step = 0; step < std::size(densities); ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step << ", density " << densities[step]);
    next.copy_from(current);
    for (auto& t : next.tensors) {
      const auto n = static_cast<uint64_t>(densities[step] * static_cast<double>(t.view().numel));
      testing::apply_random_changes(t, std::min(n, t.view().numel), rng);
    }
    CodecOptions options;
    options.chunk_bytes = 512;  // chunks much smaller than a piece: many straddle the views' edges
    options.bucket_bytes = 4096;
    options.threads = 1;
    for (size_t r = 0; r < ranks.size(); ++r) {
      TensorSet rank_base(rank_manifests[r]), rank_next(rank_manifests[r]);
      gather(ranks[r], current, rank_base);
      gather(ranks[r], next, rank_next);
      auto delta = testing::encode_delta(rank_manifests[r], options, rank_base, rank_next, step + 1, step + 2);
      ASSERT_TRUE(delta.ok()) << delta.status().to_string();
      DeltaApplier applier(rank_manifests[r], 1);
      auto version = applier.verify(testing::bucket_spans(delta->buckets), step + 1);
      ASSERT_TRUE(version.ok()) << version.status().to_string();
      for (size_t c = 0; c < views.size(); ++c) {
        for (const ChunkBody& chunk : version->chunks) {
          const uint64_t start = chunk.header.element_start;
          const bool needed = !routes[c][r].intersect(chunk.header.tensor_index, start, start + chunk.header.element_count).empty();
          (needed ? needed_chunks : skipped_chunks) += 1;
        }
        Status s = apply_remapped(*version, rank_manifests[r], routes[c][r], processes[c].views(), pool);
        ASSERT_TRUE(s.ok()) << "rank " << r << " -> process " << c << ": " << s.to_string();
      }
    }
    for (size_t c = 0; c < views.size(); ++c) {
      TensorSet want(testing::make_manifest(views[c].local_specs()));
      gather(views[c], next, want);
      EXPECT_TRUE(processes[c].same_bits(want)) << "process " << c;
      EXPECT_TRUE(processes[c].guards_intact()) << "process " << c;
    }
    current.copy_from(next);
  }
  // The TP2 processes hold half of most tensors: many chunks are not theirs.
  EXPECT_GT(skipped_chunks, needed_chunks / 4) << needed_chunks << " needed, " << skipped_chunks << " skipped";
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
