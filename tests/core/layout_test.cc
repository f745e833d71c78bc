// Logical layouts: row, column and flat shards and fused views resolved to runs, checked against
// a reference that maps every local element by its multi-index; ownership tiling with gaps and
// overlaps; bad declarations refused naming the tensor.
#include "core/layout.h"

#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

namespace deltacast {
namespace {

std::vector<TensorSpec> group() {
  return {{"q", DType::kBF16, {8, 4}},     {"k", DType::kBF16, {4, 4}}, {"v", DType::kBF16, {4, 4}},
          {"w", DType::kF32, {3, 6}},      {"e", DType::kBF16, {10}},   {"x", DType::kBF16, {2, 3, 5}},
          {"s", DType::kF32, {}}};
}

// Local element -> logical (tensor, flat index), from the runs.
std::vector<std::pair<uint32_t, uint64_t>> expand(const Layout& layout, uint32_t local_tensor) {
  std::vector<std::pair<uint32_t, uint64_t>> out(layout.local_specs()[local_tensor].numel(), {UINT32_MAX, 0});
  for (const ElementRun& r : layout.runs()) {
    if (r.local_tensor != local_tensor) continue;
    for (uint64_t i = 0; i < r.length; ++i) {
      EXPECT_EQ(out[r.local + i].first, UINT32_MAX) << "local element " << r.local + i << " mapped twice";
      out[r.local + i] = {r.tensor, r.logical + i};
    }
  }
  return out;
}

// The same, the slow way: walk the local tensor's multi-indices, find the piece by the
// concatenation coordinate, and compute the logical multi-index.
std::vector<std::pair<uint32_t, uint64_t>> reference(const std::vector<TensorSpec>& logical, const LocalTensorSpec& local,
                                                     const TensorSpec& local_spec) {
  std::vector<std::pair<uint32_t, uint64_t>> out;
  const auto find = [&](const std::string& name) {
    for (uint32_t i = 0; i < logical.size(); ++i) {
      if (logical[i].name == name) return i;
    }
    return UINT32_MAX;
  };
  if (local.pieces[0].flat) {
    for (const PieceSpec& p : local.pieces) {
      for (uint64_t i = p.begin; i < p.end; ++i) out.push_back({find(p.tensor), i});
    }
    return out;
  }
  const auto& shape = local_spec.shape;
  std::vector<uint64_t> at(shape.size(), 0);
  for (uint64_t n = 0; n < local_spec.numel(); ++n) {
    // Which piece holds this concatenation coordinate.
    uint64_t coordinate = at[local.concat_dim];
    size_t k = 0;
    for (;; ++k) {
      const PieceSpec& p = local.pieces[k];
      const uint64_t extent = p.dim == local.concat_dim ? p.end - p.begin : logical[find(p.tensor)].shape[local.concat_dim];
      if (coordinate < extent) break;
      coordinate -= extent;
    }
    const PieceSpec& p = local.pieces[k];
    const TensorSpec& t = logical[find(p.tensor)];
    std::vector<uint64_t> index = at;
    index[local.concat_dim] = coordinate;
    index[p.dim] += p.begin;
    uint64_t flat = 0;
    for (size_t j = 0; j < index.size(); ++j) flat = flat * t.shape[j] + index[j];
    out.push_back({find(p.tensor), flat});
    for (size_t j = shape.size(); j-- > 0;) {
      if (++at[j] < shape[j]) break;
      at[j] = 0;
    }
  }
  return out;
}

void expect_matches_reference(const std::vector<TensorSpec>& logical, const std::vector<LocalTensorSpec>& locals) {
  auto layout = Layout::resolve(logical, locals);
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  ASSERT_EQ(layout->local_specs().size(), locals.size());
  for (uint32_t i = 0; i < locals.size(); ++i) {
    EXPECT_EQ(expand(*layout, i), reference(logical, locals[i], layout->local_specs()[i])) << locals[i].name;
  }
}

TEST(Layout, RowColumnAndFlatShardsAndFusedViewsMapLikeTheReference) {
  const auto logical = group();
  expect_matches_reference(logical, {
      {"q_rows", {{"q", false, 0, 2, 6}}},                                      // a row shard
      {"w_cols", {{"w", false, 1, 2, 5}}},                                      // a column shard
      {"e_flat", {{"e", true, 0, 3, 9}}},                                       // an FSDP flat shard
      {"qkv", {{"q", false, 0, 4, 8}, {"k", false, 0, 2, 4}, {"v", false, 0, 2, 4}}},  // fused rows, TP rank 1 of 2
      {"kv_cols", {{"k", false, 1, 0, 2}, {"v", false, 1, 0, 2}}, 1},           // fused along columns
      {"x_mid", {{"x", false, 1, 1, 3}}},                                       // a middle dimension of a 3-D tensor
      {"x_fused", {{"x", false, 2, 0, 2}, {"x", false, 2, 3, 5}}, 2},           // two ranges of one tensor
      {"s_all", {{"s", true, 0, 0, 1}}},                                        // a scalar, flat
  });
  auto layout = Layout::resolve(logical, {{"qkv", {{"q", false, 0, 4, 8}, {"k", false, 0, 2, 4}, {"v", false, 0, 2, 4}}}});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->local_specs()[0], (TensorSpec{"qkv", DType::kBF16, {8, 4}}));
  // Three runs, one per piece: rows are contiguous in both tensors.
  EXPECT_EQ(layout->runs().size(), 3u);
  auto cols = Layout::resolve(logical, {{"w_cols", {{"w", false, 1, 2, 5}}}});
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(std::vector<ElementRun>(cols->runs().begin(), cols->runs().end()),
            (std::vector<ElementRun>{{3, 2, 3, 0, 0}, {3, 8, 3, 0, 3}, {3, 14, 3, 0, 6}}));
}

TEST(Layout, RandomShardsAndConcatenationsMatchTheReference) {
  std::mt19937_64 rng(21);
  for (int round = 0; round < 200; ++round) {
    const uint32_t rank = 1 + rng() % 4;
    const uint32_t concat = rng() % rank;
    std::vector<TensorSpec> logical;
    LocalTensorSpec local{"fused", {}, concat};
    const int pieces = 1 + static_cast<int>(rng() % 3);
    std::vector<uint64_t> common(rank);
    for (auto& d : common) d = 1 + rng() % 5;
    for (int k = 0; k < pieces; ++k) {
      TensorSpec t{fmt::format("t{}", k), DType::kBF16, common};
      const uint32_t dim = rng() % rank;
      t.shape[concat] = 1 + rng() % 6;  // pieces may differ along the concatenation dimension only
      if (dim != concat) t.shape[dim] = common[dim];
      const uint64_t size = t.shape[dim];
      const uint64_t begin = rng() % size;
      const uint64_t end = dim == concat ? begin + 1 + rng() % (size - begin) : size;  // others stay whole
      const uint64_t from = dim == concat ? begin : 0;
      logical.push_back(t);
      local.pieces.push_back({t.name, false, dim, from, end});
    }
    expect_matches_reference(logical, {local});
  }
}

TEST(Layout, IntersectClipsRunsToAChunk) {
  auto layout = Layout::resolve(group(), {{"w_cols", {{"w", false, 1, 2, 5}}}, {"w_all", {{"w", true, 0, 0, 18}}}});
  ASSERT_TRUE(layout.ok());
  // Elements 9..15 of w: w_cols holds 9, 10 and 14; w_all holds them all.
  const auto runs = layout->intersect(3, 9, 15);
  EXPECT_EQ(runs, (std::vector<ElementRun>{{3, 9, 6, 1, 9}, {3, 9, 2, 0, 4}, {3, 14, 1, 0, 6}}));
  EXPECT_TRUE(layout->intersect(3, 5, 5).empty());
  EXPECT_TRUE(layout->intersect(0, 0, 100).empty());   // q: held by nobody here
  EXPECT_TRUE(layout->intersect(99, 0, 100).empty());  // no such tensor
  EXPECT_EQ(layout->held_elements(3), 9u + 18u);
  EXPECT_EQ(layout->held_elements(0), 0u);
}

// Against a scan of every run, with local tensors overlapping in the logical one (tied weights).
TEST(Layout, IntersectFindsWhatAScanOfEveryRunFinds) {
  const std::vector<TensorSpec> logical = {{"a", DType::kBF16, {12, 10}}, {"b", DType::kBF16, {7, 9}}};
  std::mt19937_64 rng(22);
  for (int round = 0; round < 50; ++round) {
    std::vector<LocalTensorSpec> locals;
    for (int k = 0; k < 4; ++k) {
      const bool on_a = rng() % 2 == 0;
      const uint32_t dim = rng() % 2;
      const uint64_t size = on_a ? logical[0].shape[dim] : logical[1].shape[dim];
      const uint64_t begin = rng() % size;
      locals.push_back({fmt::format("l{}", k), {{on_a ? "a" : "b", false, dim, begin, begin + 1 + rng() % (size - begin)}}});
    }
    auto layout = Layout::resolve(logical, locals);
    ASSERT_TRUE(layout.ok()) << layout.status().to_string();
    for (int q = 0; q < 30; ++q) {
      const uint32_t tensor = rng() % 2;
      const uint64_t numel = logical[tensor].numel();
      const uint64_t begin = rng() % numel;
      const uint64_t end = begin + rng() % (numel - begin + 1);
      std::vector<ElementRun> want;
      for (const ElementRun& r : layout->runs()) {
        const uint64_t from = std::max(begin, r.logical), to = std::min(end, r.logical + r.length);
        if (r.tensor == tensor && from < to) want.push_back({tensor, from, to - from, r.local_tensor, r.local + (from - r.logical)});
      }
      EXPECT_EQ(layout->intersect(tensor, begin, end), want) << "round " << round << " [" << begin << ", " << end << ")";
    }
  }
}

TEST(Layout, BadDeclarationsAreRefusedNamingTheTensor) {
  const auto logical = group();
  const auto refused = [&](std::vector<LocalTensorSpec> locals, const std::string& words) {
    auto layout = Layout::resolve(logical, std::move(locals));
    ASSERT_FALSE(layout.ok()) << words;
    EXPECT_NE(layout.status().message().find(words), std::string::npos) << layout.status().message();
    EXPECT_NE(layout.status().message().find("'mine'"), std::string::npos) << layout.status().message();
  };
  refused({{"mine", {{"nope", false, 0, 0, 1}}}}, "'nope', which is not a logical tensor");
  refused({{"mine", {{"q", false, 2, 0, 1}}}}, "names dimension 2 of 'q', which has 2");
  refused({{"mine", {{"q", false, 0, 4, 9}}}}, "runs past dimension 0 of 'q' (size 8)");
  refused({{"mine", {{"e", true, 0, 5, 11}}}}, "runs past the 10 elements of 'e'");
  refused({{"mine", {{"q", false, 0, 3, 3}}}}, "empty or reversed");
  refused({{"mine", {{"q", false, 0, 0, 2}, {"w", false, 0, 0, 1}}}}, "dtypes bf16 ('q') and f32 ('w')");
  refused({{"mine", {{"q", false, 0, 0, 2}, {"x", false, 0, 0, 1}}}}, "does not concatenate");
  refused({{"mine", {{"q", false, 0, 0, 2}, {"k", false, 1, 0, 2}}}}, "does not concatenate");
  refused({{"mine", {{"e", true, 0, 0, 2}, {"q", false, 0, 0, 1}}}}, "flat pieces and dimension ranges");
  refused({{"mine", {}}}, "no pieces");
  refused({{"mine", {{"q", false, 0, 0, 2}}, 2}}, "concatenated along dimension 2");
  refused({{"mine", {{"q", false, 0, 0, 2}}}, {"mine", {{"q", false, 0, 2, 4}}}}, "declared twice");
  refused({{"mine", {{"s", false, 0, 0, 1}}}}, "names dimension 0 of 's', which has 0");
}

TEST(Layout, OwnershipMustTileEveryLogicalTensorOnce) {
  const std::vector<TensorSpec> logical = {{"q", DType::kBF16, {8, 4}}, {"w", DType::kF32, {3, 6}}, {"e", DType::kBF16, {10}}};
  const auto rank = [&](std::vector<LocalTensorSpec> locals) { return Layout::resolve(logical, std::move(locals)).value(); };
  // Four ranks: row shards of q, column shards of w, flat shards of e; each rank owns a piece of each.
  std::vector<Layout> owners;
  for (uint64_t r = 0; r < 4; ++r) {
    std::vector<LocalTensorSpec> mine = {{"q", {{"q", false, 0, 2 * r, 2 * r + 2}}}};
    if (r < 3) mine.push_back({"w", {{"w", false, 1, 2 * r, 2 * r + 2}}});
    mine.push_back({"e", {{"e", true, 0, r * 3, std::min<uint64_t>(10, r * 3 + 3)}}});
    owners.push_back(rank(mine));
  }
  EXPECT_TRUE(check_tiling(logical, owners).ok()) << check_tiling(logical, owners).to_string();

  auto gap = owners;
  gap[3] = rank({{"q", {{"q", false, 0, 6, 7}}}, {"e", {{"e", true, 0, 9, 10}}}});
  Status s = check_tiling(logical, gap);
  EXPECT_NE(s.message().find("logical tensor 'q': elements [28, 32) are owned by no rank"), std::string::npos) << s.to_string();

  auto overlap = owners;
  overlap[2] = rank({{"q", {{"q", false, 0, 3, 6}}}, {"w", {{"w", false, 1, 4, 6}}}, {"e", {{"e", true, 0, 6, 9}}}});
  s = check_tiling(logical, overlap);
  EXPECT_NE(s.message().find("logical tensor 'q': element 12 is owned by rank 1 and rank 2"), std::string::npos)
      << s.to_string();

  auto missing = owners;
  missing.pop_back();
  s = check_tiling(logical, missing);
  EXPECT_NE(s.message().find("logical tensor 'q': elements [24, 32) are owned by no rank"), std::string::npos)
      << s.to_string();
}

}  // namespace
}  // namespace deltacast

namespace deltacast {
namespace {

// Composition against element maps: every element of a rank's tensor, taken to its logical
// element through the rank's runs, must land exactly where the view holds that logical element
// (everywhere it does: tied copies), and nowhere else.
TEST(Layout, ComposedLayoutsTakeARanksElementsWhereTheViewHoldsThem) {
  const std::vector<TensorSpec> logical = {{"a", DType::kBF16, {12, 10}}, {"b", DType::kBF16, {7, 9}},
                                           {"c", DType::kBF16, {30}}};
  std::mt19937_64 rng(23);
  const auto random_piece = [&](uint32_t tensor) {
    const TensorSpec& t = logical[tensor];
    const bool flat = t.shape.size() == 1 || rng() % 4 == 0;
    const uint32_t dim = flat ? 0 : rng() % 2;
    const uint64_t size = flat ? t.numel() : t.shape[dim];
    const uint64_t begin = rng() % size;
    return PieceSpec{t.name, flat, dim, begin, begin + 1 + rng() % (size - begin)};
  };
  size_t nonempty = 0;
  for (int round = 0; round < 100; ++round) {
    std::vector<LocalTensorSpec> owner_locals, view_locals;
    for (int k = 0; k < 3; ++k) owner_locals.push_back({fmt::format("o{}", k), {random_piece(rng() % 3)}});
    for (int k = 0; k < 3; ++k) view_locals.push_back({fmt::format("v{}", k), {random_piece(rng() % 3)}});
    // A fused view: rows of a and b side by side along dimension 1 need equal row counts; rows 0..6.
    view_locals.push_back({"fused", {{"a", false, 0, 0, 7}, {"b", false, 0, 0, 7}}, 1});
    auto owner = Layout::resolve(logical, owner_locals);
    auto view = Layout::resolve(logical, view_locals);
    ASSERT_TRUE(owner.ok()) << owner.status().to_string();
    ASSERT_TRUE(view.ok()) << view.status().to_string();
    auto composed = Layout::compose(*owner, *view);
    ASSERT_TRUE(composed.ok()) << composed.status().to_string();
    EXPECT_EQ(composed->local_specs(), view->local_specs());
    for (uint32_t ot = 0; ot < owner->local_specs().size(); ++ot) {
      const auto owner_map = expand(*owner, ot);  // owner element -> logical element
      for (uint64_t e = 0; e < owner_map.size(); ++e) {
        std::vector<std::pair<uint32_t, uint64_t>> want;  // (view tensor, view element)
        for (uint32_t vt = 0; vt < view->local_specs().size(); ++vt) {
          const auto view_map = expand(*view, vt);
          for (uint64_t x = 0; x < view_map.size(); ++x) {
            if (view_map[x] == owner_map[e]) want.push_back({vt, x});
          }
        }
        std::vector<std::pair<uint32_t, uint64_t>> got;
        for (const ElementRun& r : composed->intersect(ot, e, e + 1)) got.push_back({r.local_tensor, r.local});
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want) << "round " << round << ": element " << e << " of owner tensor " << ot;
        nonempty += want.empty() ? 0 : 1;
      }
    }
  }
  EXPECT_GT(nonempty, 1000u) << "the random layouts hardly overlapped: the test proves little";
}

TEST(Layout, RowShardsSeenByRowViewsComposeToOneRunPerOverlap) {
  const std::vector<TensorSpec> logical = {{"w", DType::kBF16, {8, 6}}};
  // Trainer rank 1 of 4 holds rows 2..3; a TP2 rank 0 view holds rows 0..3: one run of 12
  // elements. A column view (columns 0..2) cuts the rank's rows into one run per row.
  auto owner = Layout::resolve(logical, {{"w_rank1", {{"w", false, 0, 2, 4}}}});
  auto rows = Layout::resolve(logical, {{"w_tp0", {{"w", false, 0, 0, 4}}}});
  auto cols = Layout::resolve(logical, {{"w_cols", {{"w", false, 1, 0, 3}}}});
  auto other = Layout::resolve(logical, {{"w_tp1", {{"w", false, 0, 4, 8}}}});
  ASSERT_TRUE(owner.ok() && rows.ok() && cols.ok() && other.ok());
  auto a = Layout::compose(*owner, *rows);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(std::vector<ElementRun>(a->runs().begin(), a->runs().end()), (std::vector<ElementRun>{{0, 0, 12, 0, 12}}));
  auto b = Layout::compose(*owner, *cols);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::vector<ElementRun>(b->runs().begin(), b->runs().end()),
            (std::vector<ElementRun>{{0, 0, 3, 0, 6}, {0, 6, 3, 0, 9}}));
  auto c = Layout::compose(*owner, *other);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->runs().empty()) << "a view holding none of the rank's rows needs nothing from it";
  auto mismatched = Layout::compose(*owner, *Layout::resolve(group(), {}));
  EXPECT_FALSE(mismatched.ok());
}

}  // namespace
}  // namespace deltacast
