// A version of logical tensors applied to processes holding views of them: a TP rank's fused qkv,
// a column shard, a flat shard and a tied whole copy, over chunks that straddle every boundary.
// Each must end equal to its views of the version applied to the whole logical tensors.
#include "sparse/remapped_apply.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/aligned_buffer.h"
#include "support/codec_harness.h"

namespace deltacast {
namespace {

using testing::TensorSet;

struct Local {
  Layout layout;
  std::vector<AlignedBuffer> storage;
  std::vector<TensorView> views;

  // Every local tensor filled from the logical tensors `from` (through the layout's runs), other
  // bytes poisoned.
  Local(Layout l, const TensorSet& from) : layout(std::move(l)) {
    for (const auto& spec : layout.local_specs()) {
      AlignedBuffer& b = storage.emplace_back(spec.nbytes());
      std::memset(b.data(), 0xA5, b.size());
      views.push_back(TensorView{b.data(), spec.dtype, spec.numel(), Device{}});
    }
    gather(from, views);
  }
  void gather(const TensorSet& from, const std::vector<TensorView>& into) const {
    gather_views(layout, from.views(), into);
  }
  // The local tensors as they should be after `expected` was applied to the logical tensors.
  bool holds(const TensorSet& expected) const {
    std::vector<AlignedBuffer> want;
    std::vector<TensorView> want_views;
    for (const auto& v : views) {
      want.emplace_back(v.nbytes());
      want_views.push_back(TensorView{want.back().data(), v.dtype, v.numel, Device{}});
    }
    gather(expected, want_views);
    for (size_t i = 0; i < views.size(); ++i) {
      if (std::memcmp(views[i].data, want_views[i].data, views[i].nbytes()) != 0) return false;
    }
    return true;
  }
};

TEST(RemappedApply, EveryViewEndsAsTheLogicalTensorsDo) {
  const std::vector<TensorSpec> logical = {{"q", DType::kBF16, {64, 48}}, {"k", DType::kBF16, {32, 48}},
                                           {"v", DType::kBF16, {32, 48}}, {"w", DType::kF32, {40, 30}},
                                           {"e", DType::kBF16, {1000}}};
  const Manifest manifest = testing::make_manifest(logical);
  const std::vector<std::vector<LocalTensorSpec>> processes = {
      // TP rank 1 of 2: fused rows of q, k, v; its half of w's columns; an FSDP-like flat range of e.
      {{"qkv", {{"q", false, 0, 32, 64}, {"k", false, 0, 16, 32}, {"v", false, 0, 16, 32}}},
       {"w_cols", {{"w", false, 1, 15, 30}}},
       {"e_part", {{"e", true, 0, 100, 900}}}},
      // TP1 with q tied twice (two local tensors over the same logical elements) and nothing of w.
      {{"q_a", {{"q", false, 0, 0, 64}}}, {"q_b", {{"q", false, 0, 0, 64}}}, {"kv", {{"k", false, 1, 0, 48}, {"v", false, 1, 0, 48}}, 1}},
  };
  std::mt19937_64 rng(31);
  ThreadPool pool(3);
  for (ValueCodec codec : {ValueCodec::kUlp, ValueCodec::kRaw}) {
    for (double density : {0.003, 0.05, 0.6}) {
      SCOPED_TRACE(::testing::Message() << value_codec_name(codec) << " density " << density);
      CodecOptions options;
      options.value_codec = codec;
      options.chunk_bytes = 1024;  // chunks far smaller than the tensors: they straddle every view's edges
      options.bucket_bytes = 4096;
      options.threads = 2;
      TensorSet base(manifest), current(manifest);
      testing::fill_random_bits(base, rng);
      current.copy_from(base);
      for (auto& t : current.tensors) {
        testing::apply_random_changes(t, static_cast<uint64_t>(density * static_cast<double>(t.view().numel)) + 1, rng);
      }
      auto delta = testing::encode_delta(manifest, options, base, current, 1, 2);
      ASSERT_TRUE(delta.ok()) << delta.status().to_string();
      DeltaApplier applier(manifest, 2);
      const auto spans = testing::bucket_spans(delta->buckets);
      auto version = applier.verify(spans, 1);
      ASSERT_TRUE(version.ok()) << version.status().to_string();
      for (const auto& locals : processes) {
        auto layout = Layout::resolve(logical, locals);
        ASSERT_TRUE(layout.ok()) << layout.status().to_string();
        Local process(std::move(layout).value(), base);
        ASSERT_TRUE(process.holds(base));
        ASSERT_TRUE(apply_remapped(*version, manifest, process.layout, process.views, pool).ok());
        EXPECT_TRUE(process.holds(current)) << locals[0].name;
      }
    }
  }
}

TEST(RemappedApply, MismatchedTensorsAreRefusedByName) {
  const std::vector<TensorSpec> logical = {{"q", DType::kBF16, {8, 4}}};
  const Manifest manifest = testing::make_manifest(logical);
  auto layout = Layout::resolve(logical, {{"q_rows", {{"q", false, 0, 0, 4}}}});
  ASSERT_TRUE(layout.ok());
  ThreadPool pool(1);
  VersionChunks version;
  version.manifest_hash = manifest.hash();
  AlignedBuffer wrong(8 * 2);
  const std::vector<TensorView> short_one = {TensorView{wrong.data(), DType::kBF16, 8, Device{}}};
  Status s = apply_remapped(version, manifest, *layout, short_one, pool);
  EXPECT_NE(s.message().find("tensor 'q_rows': 8 elements of bf16, the layout says 16 of bf16"), std::string::npos)
      << s.to_string();
  version.manifest_hash ^= 1;
  EXPECT_EQ(apply_remapped(version, manifest, *layout, short_one, pool).code(), StatusCode::kMismatch);
}

}  // namespace
}  // namespace deltacast
