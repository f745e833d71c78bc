// Whether a version crosses a slow WAN sooner with the zstd stage on top of the codec. Every
// consumer takes the same bytes, so the choice is per version: what zstd saves on the slowest
// WAN link must outweigh what it costs the producer to compress and a consumer to decompress.
// Measured, not guessed: the link's rate is the rate book's, zstd's ratio and speed a sample of
// the version's own chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace deltacast {

struct ZstdSample {
  double ratio = 1;            // compressed bytes over raw bytes
  double compress_rate = 0;    // raw bytes per second, one thread
  double decompress_rate = 0;  // raw bytes per second, one thread
  size_t bytes = 0;            // raw bytes sampled

  bool measured() const { return bytes > 0 && compress_rate > 0; }
};

// zstd at `level` over chunks (the codec's, with their headers) taken evenly through `chunks`,
// about `max_bytes` of them: each compressed as the zstd stage would, and decompressed again.
ZstdSample sample_zstd(std::span<const std::span<const uint8_t>> chunks, int level, size_t max_bytes = size_t{1} << 20);

// What zstd saves on a link of `wan_rate` bytes/s, per raw byte ((1 - ratio) / wan_rate), is
// at least kZstdPayback times what it costs: compressing on `threads` threads plus
// decompressing on one (a consumer applies a chunk as it decompresses it). 0 rates: no.
inline constexpr double kZstdPayback = 1.5;
bool zstd_pays_off(const ZstdSample& sample, double wan_rate, uint32_t threads);

}  // namespace deltacast
