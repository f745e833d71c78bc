// deltacast-bench codec: encodes the RL-like trace step by step and reports
// compression against the published baselines and speed against memcpy,
// both measured in the same run.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/bench_commands.h"
#include "cli/bench_util.h"
#include "core/aligned_buffer.h"
#include "cli/plot.h"
#include "sparse/delta_applier.h"
#include "sparse/delta_encoder.h"
#include "sparse/trace/model_layout.h"
#include "sparse/trace/rl_trace.h"
#include "codec/sparse_baselines.h"

namespace deltacast::bench {

namespace {

struct CodecArgs {
  uint64_t elements = 67108864;
  double lr = 3e-7;
  int steps = 3;
  std::string value_codec = "ulp";
  std::string dtype = "bf16";
  int zstd = 0;
  unsigned threads = 0;
  int reps = 3;
  uint64_t seed = 1;
  uint64_t chunk_bytes = 2ull << 20;
  bool json = false;
  std::string plot;  // draw the steps into this PNG (plot_codec.py)
};

// A copy of every tensor, to reset the shadow or the consumer between timed repetitions.
struct Snapshot {
  std::vector<AlignedBuffer> buffers;
  std::vector<TensorView> views;

  explicit Snapshot(std::span<const TensorView> from) {
    for (const auto& t : from) {
      buffers.emplace_back(t.nbytes());
      views.push_back(TensorView{buffers.back().data(), t.dtype, t.numel, Device{}});
    }
    copy_from(from);
  }
  void copy_from(std::span<const TensorView> from) {
    for (size_t i = 0; i < views.size(); ++i) std::memcpy(views[i].data, from[i].data, from[i].nbytes());
  }
  void copy_to(std::span<const TensorView> to) const {
    for (size_t i = 0; i < views.size(); ++i) std::memcpy(to[i].data, views[i].data, views[i].nbytes());
  }
};

bool same_bits(std::span<const TensorView> a, std::span<const TensorView> b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(a[i].data, b[i].data, a[i].nbytes()) != 0) return false;
  }
  return true;
}

// One repetition's timings, all taken back to back so they see the same machine load.
struct Rep {
  double memcpy_seconds = 0;
  double encode_seconds = 0;       // one thread
  double apply_seconds = 0;        // verify + apply, one thread
  double encode_seconds_many = 0;  // all threads
  double apply_seconds_many = 0;
};

struct CodecRun {
  std::vector<Rep> reps;
  EncodedVersion version;
  bool exact = true;
};

struct Codec {
  DeltaEncoder& encoder;
  const DeltaApplier& applier;
};

// Encodes version `target` from `published` against `shadow` (reset to `base` first), then
// verifies and applies it onto `consumer` (also reset to `base`). Returns the two times.
Result<std::pair<double, double>> encode_and_apply(const Codec& codec, std::span<const TensorView> published,
                                                   Shadow& shadow, const Snapshot& base,
                                                   std::span<const TensorView> consumer, uint64_t target,
                                                   EncodedVersion* version, bool* exact) {
  base.copy_to(shadow.views());
  shadow.set_version(target - 1);
  Result<EncodedVersion> encoded = Status();
  const double encode = time_seconds([&] { encoded = codec.encoder.encode_delta(published, shadow, target); });
  if (!encoded.ok()) return encoded.status();
  *version = std::move(encoded).value();
  std::vector<std::span<const uint8_t>> spans;
  for (const auto& b : version->buckets) spans.emplace_back(b);
  base.copy_to(consumer);
  Status status;
  const double apply = time_seconds([&] {
    auto verified = codec.applier.verify(spans, target - 1);
    status = verified.ok() ? codec.applier.apply(*verified, consumer) : verified.status();
  });
  DC_RETURN_IF_ERROR(status);
  *exact = *exact && same_bits(consumer, published);
  return std::make_pair(encode, apply);
}

Result<CodecRun> run_reps(const Codec& one, const Codec& many, std::span<const TensorView> published, Shadow& shadow,
                          const Snapshot& base, std::span<const TensorView> consumer, uint8_t* memcpy_scratch,
                          uint64_t target, int reps) {
  CodecRun run;
  EncodedVersion many_version;
  for (int r = 0; r < reps; ++r) {
    Rep rep;
    rep.memcpy_seconds = 1.0 / memcpy_gbps(published, memcpy_scratch, 1);  // seconds per GB
    DC_ASSIGN_OR_RETURN(auto single,
                        encode_and_apply(one, published, shadow, base, consumer, target, &run.version, &run.exact));
    DC_ASSIGN_OR_RETURN(auto multi,
                        encode_and_apply(many, published, shadow, base, consumer, target, &many_version, &run.exact));
    std::tie(rep.encode_seconds, rep.apply_seconds) = single;
    std::tie(rep.encode_seconds_many, rep.apply_seconds_many) = multi;
    run.reps.push_back(rep);
  }
  if (many_version.buckets != run.version.buckets) return internal_error("1-thread and multi-thread encodings differ");
  return run;
}

// Median over repetitions of f(rep).
template <typename F>
double median_of(const std::vector<Rep>& reps, F&& f) {
  std::vector<double> values;
  for (const Rep& r : reps) values.push_back(f(r));
  return median(values);
}

double ratio(uint64_t dense, uint64_t wire) {
  return wire == 0 ? 0.0 : static_cast<double>(dense) / static_cast<double>(wire);
}

int run_codec(const CodecArgs& args) {
  auto codec = parse_value_codec(args.value_codec);
  auto dtype = parse_dtype(args.dtype);
  if (!codec.ok() || !dtype.ok()) {
    fmt::print(stderr, "error: {}\n", (!codec.ok() ? codec.status() : dtype.status()).message());
    return 2;
  }
  const unsigned threads = args.threads == 0 ? ThreadPool::hardware_threads() : args.threads;
  Progress progress(true);
  progress.update(fmt::format("building a {}-element {} model and its Adam state...", args.elements, args.dtype));
  TraceOptions trace_options;
  trace_options.lr = args.lr;
  trace_options.seed = args.seed;
  trace_options.publish_dtype = *dtype;
  trace_options.threads = threads;
  auto trace = RlTrace::create(transformer_layout(args.elements, *dtype), trace_options);
  if (!trace.ok()) {
    fmt::print(stderr, "error: {}\n", trace.status().message());
    return 2;
  }
  const Manifest& manifest = (*trace)->manifest();
  const std::span<const TensorView> published = (*trace)->published();

  CodecOptions options;
  options.value_codec = *codec;
  options.zstd_level = args.zstd;
  options.chunk_bytes = args.chunk_bytes;
  options.threads = 1;
  auto encoder_one = DeltaEncoder::create(manifest, options);
  options.threads = threads;
  auto encoder_many = DeltaEncoder::create(manifest, options);
  if (!encoder_one.ok() || !encoder_many.ok()) {
    fmt::print(stderr, "error: {}\n", encoder_one.status().message());
    return 2;
  }
  DeltaApplier applier_one(manifest, 1), applier_many(manifest, threads);

  auto shadow = Shadow::copy_of(manifest, published, 1);
  Snapshot base(published);
  Snapshot consumer_copy(published);
  AlignedBuffer memcpy_scratch(manifest.total_bytes());
  if (!args.json) {
    fmt::print(
        "deltacast-bench codec: {} elements of {} in {} tensors ({}), lr {}, value codec {}, zstd {}, "
        "{} threads\n",
        manifest.total_elements(), args.dtype, manifest.size(),
        human_bytes(static_cast<double>(manifest.total_bytes())), args.lr, args.value_codec, args.zstd, threads);
    fmt::print("{:>4} {:>8} {:>11} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}\n", "step", "density", "wire",
               "ratio", "int32", "int32+zs", "entropy", "enc GB/s", "app GB/s", "memcpy", "enc/app", "exact");
  }
  bool all_exact = true;
  nlohmann::json steps = nlohmann::json::array();  // every step's row, for --plot
  for (int step = 1; step <= args.steps; ++step) {
    progress.update(
        fmt::format("step {}/{}: Adam step on {} elements...", step, args.steps, manifest.total_elements()));
    base.copy_from(shadow->views());
    (*trace)->step();
    const uint64_t target = static_cast<uint64_t>(step) + 1;
    progress.update(fmt::format("step {}/{}: baselines...", step, args.steps));
    const BaselineSizes baselines = measure_baselines(base.views, published);
    progress.update(fmt::format("step {}/{}: memcpy, encode and apply ({} reps)...", step, args.steps, args.reps));
    auto run = run_reps(Codec{*encoder_one, applier_one}, Codec{*encoder_many, applier_many}, published, *shadow, base,
                        consumer_copy.views, memcpy_scratch.data(), target, args.reps);
    progress.finish();
    if (!run.ok()) {
      fmt::print(stderr, "error: {}\n", run.status().to_string());
      return 1;
    }
    const VersionStats& stats = run->version.stats;
    const bool exact = run->exact;
    all_exact = all_exact && exact;
    const double dense = static_cast<double>(stats.dense_bytes);
    const double dense_gb = dense / 1e9;
    // memcpy_seconds holds seconds per GB; speeds are model GB per second.
    const double memcpy_rate = median_of(run->reps, [](const Rep& r) { return 1.0 / r.memcpy_seconds; });
    const double encode_rate = median_of(run->reps, [&](const Rep& r) { return dense_gb / r.encode_seconds; });
    const double apply_rate = median_of(run->reps, [&](const Rep& r) { return dense_gb / r.apply_seconds; });
    // Ratios to memcpy per repetition, then the median: robust to load that drifts between repetitions.
    const double encode_vs =
        median_of(run->reps, [&](const Rep& r) { return dense_gb * r.memcpy_seconds / r.encode_seconds; });
    const double apply_vs =
        median_of(run->reps, [&](const Rep& r) { return dense_gb * r.memcpy_seconds / r.apply_seconds; });
    const double encode_rate_many =
        median_of(run->reps, [&](const Rep& r) { return dense_gb / r.encode_seconds_many; });
    const double apply_rate_many = median_of(run->reps, [&](const Rep& r) { return dense_gb / r.apply_seconds_many; });
    {
      nlohmann::json row = {
          {"step", step},
          {"elements", stats.elements},
          {"tensors", manifest.size()},
          {"dtype", args.dtype},
          {"value_codec", args.value_codec},
          {"zstd_level", args.zstd},
          {"density", stats.density()},
          {"changed", stats.changed},
          {"dense_bytes", stats.dense_bytes},
          {"wire_bytes", stats.wire_bytes},
          {"ratio", ratio(stats.dense_bytes, stats.wire_bytes)},
          {"buckets", run->version.buckets.size()},
          {"sparse_chunks", stats.sparse_chunks},
          {"dense_chunks", stats.dense_chunks},
          {"baseline_int32_bytes", baselines.int32_bytes},
          {"baseline_int32_ratio", ratio(stats.dense_bytes, baselines.int32_bytes)},
          {"baseline_int32_zstd1_bytes", baselines.int32_zstd1_bytes},
          {"baseline_int32_zstd1_ratio", ratio(stats.dense_bytes, baselines.int32_zstd1_bytes)},
          {"entropy_bound_bytes", baselines.entropy_bound_bytes},
          {"entropy_bound_ratio", ratio(stats.dense_bytes, baselines.entropy_bound_bytes)},
          {"encode_gbps", encode_rate},
          {"decode_apply_gbps", apply_rate},
          {"memcpy_gbps", memcpy_rate},
          {"encode_vs_memcpy", encode_vs},
          {"decode_apply_vs_memcpy", apply_vs},
          {"threads", threads},
          {"encode_gbps_threads", encode_rate_many},
          {"decode_apply_gbps_threads", apply_rate_many},
          {"reps", args.reps},
          {"exact", exact},
      };
      if (args.json) fmt::print("{}\n", row.dump());
      steps.push_back(std::move(row));
    }
    if (!args.json) {
      fmt::print(
          "{:>4} {:>7.3f}% {:>11} {:>7.1f}x {:>8.1f}x {:>8.1f}x {:>8.1f}x {:>9.2f} {:>9.2f} {:>9.2f} {:>4.2f}/{:<4.2f} "
          "{:>6}\n",
          step, 100 * stats.density(), human_bytes(static_cast<double>(stats.wire_bytes)),
          ratio(stats.dense_bytes, stats.wire_bytes), ratio(stats.dense_bytes, baselines.int32_bytes),
          ratio(stats.dense_bytes, baselines.int32_zstd1_bytes),
          ratio(stats.dense_bytes, baselines.entropy_bound_bytes), encode_rate, apply_rate, memcpy_rate, encode_vs,
          apply_vs, exact ? "yes" : "NO");
    }
    std::fflush(stdout);
  }
  if (!args.json) {
    fmt::print(
        "ratio = dense bytes / wire bytes; int32 = int32 index + raw value per change (SparseRL-Sync raw), "
        "int32+zs = that through zstd-1; GB/s are model bytes per second on one thread, medians of {} runs; "
        "enc/app = speed relative to a one-thread memcpy of the model timed in the same repetition.\n{}\n",
        args.reps, all_exact ? "Every step reproduced the producer's tensors bit for bit." : "NOT BIT-EXACT");
  }
  if (!args.plot.empty()) {
    if (Status s = draw_plot("plot_codec.py", nlohmann::json{{"steps", steps}}, args.plot); !s.ok()) {
      fmt::print(stderr, "deltacast-bench codec: --plot: {}\n", s.to_string());
      return 1;
    }
  }
  return all_exact ? 0 : 1;
}

}  // namespace

void add_codec_command(CLI::App& app) {
  auto args = std::make_shared<CodecArgs>();
  CLI::App* cmd = app.add_subcommand("codec", "Encode an RL-like training trace and compare against baselines");
  cmd->add_option("--elements", args->elements, "Model size in elements")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--lr", args->lr, "Adam learning rate of the trace")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--steps", args->steps, "Optimizer steps (one published version each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--value-codec", args->value_codec, "Value codec for changed elements")
      ->capture_default_str()
      ->check(CLI::IsMember({"ulp", "raw"}));
  cmd->add_option("--dtype", args->dtype, "Published dtype")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16", "f8e4m3", "f8e5m2", "f32"}));
  cmd->add_option("--zstd", args->zstd, "zstd level on chunk bodies (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(-7, 22));
  cmd->add_option("--threads", args->threads, "Threads for the multi-threaded figures (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--reps", args->reps, "Timed repetitions per figure (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--seed", args->seed, "Trace seed")->capture_default_str();
  cmd->add_option("--chunk-bytes", args->chunk_bytes, "Dense bytes per chunk")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "One JSON object per step on stdout");
  cmd->add_option("--plot", args->plot,
                  "Draw each step's compression ratio (against the baselines) and density into this PNG (matplotlib)");
  cmd->callback([args] { throw CLI::RuntimeError(run_codec(*args)); });
}

}  // namespace deltacast::bench
