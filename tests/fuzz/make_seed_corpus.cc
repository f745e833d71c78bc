// Writes valid buckets for the fuzz manifest into a directory: deltas at
// several densities with both value codecs, with and without zstd, and full
// syncs. The fuzzer mutates from these, so it starts inside the format.
#include <cstdio>
#include <random>
#include <string>

#include <fmt/format.h>

#include "fuzz_manifest.h"
#include "sparse/delta_encoder.h"

using namespace deltacast;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const Manifest m = fuzz::fuzz_manifest();
  std::mt19937_64 rng(1);
  std::vector<std::vector<uint8_t>> base, current;
  std::vector<TensorView> base_views, current_views;
  for (const auto& spec : m.tensors()) {
    base.emplace_back(spec.nbytes());
    for (auto& b : base.back()) b = static_cast<uint8_t>(rng());
    current.push_back(base.back());
  }
  for (size_t i = 0; i < m.size(); ++i) {
    base_views.push_back({base[i].data(), m[i].dtype, m[i].numel(), {}});
    current_views.push_back({current[i].data(), m[i].dtype, m[i].numel(), {}});
  }
  int written = 0;
  auto save = [&](const EncodedVersion& v, const std::string& name) {
    for (size_t b = 0; b < v.buckets.size(); ++b) {
      const std::string path = fmt::format("{}/{}-{}", argv[1], name, b);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) return false;
      std::fwrite(v.buckets[b].data(), 1, v.buckets[b].size(), f);
      std::fclose(f);
      ++written;
    }
    return true;
  };
  for (double density : {0.001, 0.02, 0.3, 1.0}) {
    for (size_t i = 0; i < m.size(); ++i) {
      current[i] = base[i];
      for (auto& byte : current[i]) {
        if (std::uniform_real_distribution<double>(0, 1)(rng) < density) byte ^= static_cast<uint8_t>(1 + rng() % 3);
      }
    }
    for (const char* codec : {"raw", "ulp"}) {
      for (int zstd : {0, 1}) {
        CodecOptions options;
        options.value_codec = *parse_value_codec(codec);
        options.zstd_level = zstd;
        options.chunk_bytes = fuzz::kFuzzChunkBytes;
        options.bucket_bytes = 4096;
        auto encoder = DeltaEncoder::create(m, options);
        auto shadow = Shadow::copy_of(m, base_views, 3);
        auto delta = encoder->encode_delta(current_views, *shadow, 4);
        if (!save(*delta, fmt::format("delta-{}-{}-z{}", density, codec, zstd))) return 1;
        if (density == 1.0) {
          if (!save(*encoder->encode_full(current_views, 4), fmt::format("full-{}-z{}", codec, zstd))) return 1;
        }
      }
    }
  }
  std::printf("wrote %d seed buckets to %s\n", written, argv[1]);
  return 0;
}
