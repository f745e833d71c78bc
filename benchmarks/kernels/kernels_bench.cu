// deltacast-bench kernels: the GPU codec on a model that lives on the device.
// Measures in one run: the device-to-device copy bandwidth (bytes read +
// written), diff+encode (bytes read / kernel time, against that copy), and
// decode+apply of the same delta; checks the result bit for bit with device
// content hashes. Writes the model layout for the PyTorch baseline script.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_commands.h"
#include "cli/bench_util.h"
#include "sparse/cuda/device_buffer.h"
#include "sparse/format.h"
#include "sparse/cuda/gpu_applier.h"
#include "sparse/cuda/gpu_encoder.h"
#include "sparse/cuda/gpu_hash.h"
#include "sparse/trace/model_layout.h"
#include "sparse/value_codec.h"

namespace deltacast::bench {

namespace {

struct KernelArgs {
  uint64_t elements = uint64_t{4} << 30;
  double density = 0.01;
  std::string value_codec = "ulp";
  std::string layout = "transformer";
  uint64_t chunk_bytes = CodecOptions{}.chunk_bytes;
  int reps = 5;
  uint64_t seed = 1;
  std::string layout_out;
  bool json = false;
};

__device__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Weights like a trained layer (bf16 of values within +-0.06); `density` of them one or two
// representable steps away in `current`, as an optimizer step leaves them.
__global__ void make_model(uint16_t* base, uint16_t* current, uint64_t n, double density, uint64_t seed) {
  const uint64_t threshold = static_cast<uint64_t>(density * 18446744073709551615.0);
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed ^ mix(i));
    const float w = (static_cast<float>(r >> 40) / 16777216.0f - 0.5f) * 0.12f;
    const uint32_t bits = __float_as_uint(w);
    const uint16_t b = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    base[i] = b;
    uint16_t c = b;
    if (mix(r) < threshold) {
      const uint64_t step = (r & 1) ? 1 : 0xffff;  // +1 or -1 in key order
      c = static_cast<uint16_t>(float_unkey((float_key(b, 16) + step * (1 + ((r >> 1) & 1))) & 0xffff, 16));
    }
    current[i] = c;
  }
}

template <typename F>
Result<double> time_events(cudaStream_t stream, F&& f) {
  cudaEvent_t a, b;
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&a));
  DC_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b));
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(a, stream));
  f();
  DC_CUDA_RETURN_IF_ERROR(cudaEventRecord(b, stream));
  DC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b));
  float ms = 0;
  DC_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / 1e3;
}

// One device buffer holding every tensor back to back, and views into it.
struct DeviceModel {
  DeviceBuffer buffer;
  std::vector<TensorView> views;

  Status allocate(const Manifest& m) {
    uint64_t padded = 0;
    for (const auto& t : m.tensors()) padded += align_up(t.nbytes(), 256);
    DC_RETURN_IF_ERROR(buffer.reserve(padded));
    uint64_t at = 0;
    for (const auto& t : m.tensors()) {
      views.push_back(TensorView{buffer.data() + at, t.dtype, t.numel(), Device{DeviceKind::kCuda, 0}});
      at += align_up(t.nbytes(), 256);
    }
    return Status();
  }
};

int run_kernels(const KernelArgs& args) {
  if (cuda_device_count() == 0) {
    fmt::print(stderr, "deltacast-bench kernels: no usable CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  auto codec = parse_value_codec(args.value_codec);
  if (!codec.ok()) return command_failed("kernels", codec.status());
  // Tensors are padded to 256-byte starts inside one allocation.
  std::vector<TensorSpec> layout = args.layout == "moe" ? moe_layout(args.elements, DType::kBF16)
                                                         : transformer_layout(args.elements, DType::kBF16);
  auto manifest = Manifest::create(layout);
  if (!manifest.ok()) return command_failed("kernels", manifest.status());
  const uint64_t bytes = manifest->total_bytes();
  if (!args.layout_out.empty()) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const auto& t : manifest->tensors()) shapes.push_back({{"name", t.name}, {"shape", t.shape}});
    std::ofstream(args.layout_out) << nlohmann::json{{"density", args.density}, {"seed", args.seed}, {"tensors", shapes}}.dump();
  }
  Progress progress(!args.json);
  progress.update(fmt::format("allocating 4 x {} on {}...", human_bytes(static_cast<double>(bytes)), prop.name));
  DeviceModel base, current, target;
  for (DeviceModel* d : {&base, &current, &target}) {
    if (Status s = d->allocate(*manifest); !s.ok()) return command_failed("kernels", s);
  }
  cudaStream_t stream = nullptr;
  for (size_t i = 0; i < manifest->size(); ++i) {
    make_model<<<4096, 256>>>(reinterpret_cast<uint16_t*>(base.views[i].data),
                              reinterpret_cast<uint16_t*>(current.views[i].data), base.views[i].numel, args.density,
                              args.seed * 1000003 + i);
  }
  if (Status s = cuda_status(cudaDeviceSynchronize(), "make_model"); !s.ok()) return command_failed("kernels", s);

  CodecOptions options;
  options.value_codec = *codec;
  options.chunk_bytes = args.chunk_bytes;
  auto encoder = GpuDeltaEncoder::create(*manifest, options);
  if (!encoder.ok()) return command_failed("kernels", encoder.status());
  auto applier = GpuApplier::create(*manifest);
  if (!applier.ok()) return command_failed("kernels", applier.status());
  // The baseline of the same run for the apply pass: every group decoded a second time.
  auto decoded_again = GpuApplier::create(*manifest, 0, 0, GpuApplyOptions{.kept_changes_limit_bytes = 0});
  if (!decoded_again.ok()) return command_failed("kernels", decoded_again.status());
  auto shadow = GpuShadow::copy_of(*manifest, base.views, 1);
  if (!shadow.ok()) return command_failed("kernels", shadow.status());

  const auto restore = [&](std::span<const TensorView> to) {
    for (size_t i = 0; i < manifest->size(); ++i) cudaMemcpyAsync(to[i].data, base.views[i].data, to[i].nbytes(), cudaMemcpyDeviceToDevice, stream);
  };
  std::vector<double> copy_s, encode_kernel_s, encode_total_s, apply_kernel_s, apply_total_s, apply_upload_s,
      again_kernel_s;
  std::vector<std::span<const uint8_t>> spans;
  EncodedVersion version;
  for (int r = 0; r < args.reps + 1; ++r) {  // the first repetition warms up and is not counted
    progress.update(fmt::format("repetition {}/{}: copy, encode, apply...", r, args.reps));
    auto copy = time_events(stream, [&] {
      cudaMemcpyAsync(target.buffer.data(), base.buffer.data(), bytes, cudaMemcpyDeviceToDevice, stream);
    });
    if (!copy.ok()) return command_failed("kernels", copy.status());
    std::vector<TensorView> shadow_views(shadow->views().begin(), shadow->views().end());
    restore(shadow_views);
    cudaStreamSynchronize(stream);
    shadow->set_version(1);
    auto encoded = (*encoder)->encode_delta(current.views, *shadow, 2, stream);
    if (!encoded.ok()) return command_failed("kernels", encoded.status());
    version = std::move(encoded).value();
    spans.clear();
    for (const auto& b : version.buckets) spans.emplace_back(b);
    for (GpuApplier* a : {decoded_again->get(), applier->get()}) {  // the default way last: its result is checked
      restore(target.views);
      cudaStreamSynchronize(stream);
      if (Status s = a->apply(spans, 1, target.views, stream); !s.ok()) return command_failed("kernels", s);
    }
    if (r == 0) continue;
    again_kernel_s.push_back((*decoded_again)->last_timings().kernel_seconds);
    copy_s.push_back(*copy);
    encode_kernel_s.push_back((*encoder)->last_timings().kernel_seconds);
    encode_total_s.push_back((*encoder)->last_timings().total_seconds);
    apply_kernel_s.push_back((*applier)->last_timings().kernel_seconds);
    apply_total_s.push_back((*applier)->last_timings().total_seconds);
    apply_upload_s.push_back((*applier)->last_timings().upload_seconds);
  }
  progress.update("checking the result with device content hashes...");
  std::vector<DeviceRange> ranges;
  for (const auto* set : {&current.views, &target.views}) {
    for (const auto& v : *set) ranges.push_back({v.data, v.nbytes()});
  }
  std::vector<uint64_t> hashes(ranges.size());
  if (Status s = gpu_content_hashes(ranges, hashes, stream); !s.ok()) return command_failed("kernels", s);
  bool exact = std::equal(hashes.begin(), hashes.begin() + manifest->size(), hashes.begin() + manifest->size());
  // And the baseline's result.
  restore(target.views);
  cudaStreamSynchronize(stream);
  if (Status s = (*decoded_again)->apply(spans, 1, target.views, stream); !s.ok()) return command_failed("kernels", s);
  if (Status s = gpu_content_hashes(ranges, hashes, stream); !s.ok()) return command_failed("kernels", s);
  exact = exact && std::equal(hashes.begin(), hashes.begin() + manifest->size(), hashes.begin() + manifest->size());
  progress.finish();

  const double copy_gbps = gbps(2.0 * static_cast<double>(bytes), median(copy_s));
  const double encode_read_gbps = gbps(2.0 * static_cast<double>(bytes), median(encode_kernel_s));
  nlohmann::json row = {
      {"device", prop.name},
      {"elements", manifest->total_elements()},
      {"tensors", manifest->size()},
      {"layout", args.layout},
      {"chunk_bytes", args.chunk_bytes},
      {"dtype", "bf16"},
      {"value_codec", args.value_codec},
      {"density", version.stats.density()},
      {"changed", version.stats.changed},
      {"dense_bytes", bytes},
      {"wire_bytes", version.stats.wire_bytes},
      {"ratio", static_cast<double>(bytes) / static_cast<double>(version.stats.wire_bytes)},
      {"copy_gbps", copy_gbps},
      {"encode_kernel_ms", 1e3 * median(encode_kernel_s)},
      {"encode_read_gbps", encode_read_gbps},
      {"encode_vs_copy", encode_read_gbps / copy_gbps},
      {"encode_total_ms", 1e3 * median(encode_total_s)},
      {"apply_kernel_ms", 1e3 * median(apply_kernel_s)},
      {"apply_upload_ms", 1e3 * median(apply_upload_s)},
      {"apply_total_ms", 1e3 * median(apply_total_s)},
      {"apply_kept_changes", (*applier)->last_timings().kept_changes},
      {"apply_decoded_again_kernel_ms", 1e3 * median(again_kernel_s)},
      {"apply_kept_speedup", median(again_kernel_s) / median(apply_kernel_s)},
      {"reps", args.reps},
      {"exact", exact},
  };
  if (args.json) {
    fmt::print("{}\n", row.dump());
  } else {
    fmt::print("deltacast-bench kernels on {}: {} bf16 elements in {} tensors, {:.3f}% changed\n", prop.name,
               manifest->total_elements(), manifest->size(), 100 * version.stats.density());
    fmt::print("  device copy            {:8.1f} GB/s (read + written)\n", copy_gbps);
    fmt::print("  diff+encode kernels    {:8.2f} ms, reads {:.1f} GB/s = {:.2f} x copy\n", 1e3 * median(encode_kernel_s),
               encode_read_gbps, encode_read_gbps / copy_gbps);
    fmt::print("  encode, end to end     {:8.2f} ms ({} on the wire, {:.1f}x smaller)\n", 1e3 * median(encode_total_s),
               human_bytes(static_cast<double>(version.stats.wire_bytes)),
               static_cast<double>(bytes) / static_cast<double>(version.stats.wire_bytes));
    fmt::print("  verify+apply kernels   {:8.2f} ms (upload {:.2f} ms, end to end {:.2f} ms), changes {}\n",
               1e3 * median(apply_kernel_s), 1e3 * median(apply_upload_s), 1e3 * median(apply_total_s),
               (*applier)->last_timings().kept_changes ? "kept" : "decoded again");
    fmt::print("  ... groups decoded again {:8.2f} ms: kept {:.2f}x faster\n", 1e3 * median(again_kernel_s),
               median(again_kernel_s) / median(apply_kernel_s));
    fmt::print("  bit-exact              {}\n", exact ? "yes" : "NO");
  }
  return exact ? 0 : 1;
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  auto args = std::make_shared<KernelArgs>();
  CLI::App* cmd = app.add_subcommand("kernels", "GPU diff+encode and decode+apply against a device copy");
  cmd->add_option("--elements", args->elements, "Model size in bf16 elements")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--density", args->density, "Fraction of elements changed")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--value-codec", args->value_codec, "Value codec")->capture_default_str()->check(CLI::IsMember({"ulp", "raw"}));
  cmd->add_option("--reps", args->reps, "Timed repetitions (medians reported)")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("--seed", args->seed, "Model seed")->capture_default_str();
  cmd->add_option("--layout", args->layout, "Tensor shapes: a dense transformer, or a fine-grained MoE (10^4 tensors)")
      ->capture_default_str()
      ->check(CLI::IsMember({"transformer", "moe"}));
  cmd->add_option("--chunk-bytes", args->chunk_bytes, "Dense bytes per chunk (the unit of parallel work)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 30));
  cmd->add_option("--layout-out", args->layout_out, "Write the model layout (JSON) for the PyTorch baseline");
  cmd->add_flag("--json", args->json, "One JSON object on stdout");
  cmd->callback([args] { throw CLI::RuntimeError(run_kernels(*args)); });
}

}  // namespace deltacast::bench
