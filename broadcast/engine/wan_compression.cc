#include "broadcast/engine/wan_compression.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/byte_buffer.h"
#include "sparse/chunk_encoder.h"
#include "sparse/format.h"
#include "sparse/zstd_stage.h"

namespace deltacast {

ZstdSample sample_zstd(std::span<const std::span<const uint8_t>> chunks, int level, size_t max_bytes) {
  using Clock = std::chrono::steady_clock;
  size_t total = 0;
  for (const auto& chunk : chunks) total += chunk.size();
  ZstdSample sample;
  if (total == 0 || level == 0) return sample;
  // A chunk every `every`-th share of the bytes: the sample spreads over the tensors (their
  // deltas differ), not the first chunks alone.
  const double every = std::max(1.0, static_cast<double>(total) / static_cast<double>(std::max<size_t>(1, max_bytes)));
  size_t compressed = 0;
  double begin = 0, next = 0;  // where the chunk starts, and where the next one is taken
  double compress_seconds = 0, decompress_seconds = 0;
  ByteBuffer out;
  std::vector<uint8_t> raw;
  for (const auto& chunk : chunks) {
    const double at = begin;
    begin += static_cast<double>(chunk.size());
    if (chunk.empty() || at + static_cast<double>(chunk.size()) / 2 < next) continue;  // its middle before the mark
    next = at + static_cast<double>(chunk.size()) * every;
    out.clear();
    const auto start = Clock::now();
    compress_chunk(chunk, level, &out);
    const auto packed = Clock::now();
    const auto header = ChunkHeader::parse(out.span());
    if (header.ok() && header->compression == Compression::kZstd) {
      raw.resize(header->raw_body_bytes);
      (void)zstd_decompress_exact(out.span().subspan(ChunkHeader::kBytes, header->body_bytes), raw.data(), raw.size());
    }
    decompress_seconds += std::chrono::duration<double>(Clock::now() - packed).count();
    compress_seconds += std::chrono::duration<double>(packed - start).count();
    sample.bytes += chunk.size();
    compressed += std::min(out.size(), chunk.size());
    if (sample.bytes >= max_bytes) break;
  }
  sample.ratio = static_cast<double>(compressed) / static_cast<double>(sample.bytes);
  // A timer's tick on a tiny sample: no faster than 100 GB/s.
  const double floor = static_cast<double>(sample.bytes) / 100e9;
  sample.compress_rate = static_cast<double>(sample.bytes) / std::max(compress_seconds, floor);
  sample.decompress_rate = static_cast<double>(sample.bytes) / std::max(decompress_seconds, floor);
  return sample;
}

bool zstd_pays_off(const ZstdSample& sample, double wan_rate, uint32_t threads) {
  if (!sample.measured() || wan_rate <= 0 || sample.ratio >= 1) return false;
  const double saved = (1 - sample.ratio) / wan_rate;
  const double spent = 1 / (sample.compress_rate * std::max<uint32_t>(1, threads)) + 1 / sample.decompress_rate;
  return saved >= kZstdPayback * spent;
}

}  // namespace deltacast
