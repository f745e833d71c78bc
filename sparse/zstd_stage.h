// Optional zstd stage applied to a chunk body, for slow links. Compression
// contexts are kept per thread so parallel encoding does not allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/byte_buffer.h"
#include "core/status.h"

namespace deltacast {

// Levels accepted by the codec options; 0 turns the stage off.
inline constexpr int kMinZstdLevel = -7;
inline constexpr int kMaxZstdLevel = 22;

// Appends the zstd frame of `in` to `out` and returns true when it is smaller
// than `in`; otherwise leaves `out` as it was and returns false.
bool zstd_compress_if_smaller(std::span<const uint8_t> in, int level, ByteBuffer* out);

// Decompresses an untrusted frame that must expand to exactly `out_size` bytes.
Status zstd_decompress_exact(std::span<const uint8_t> in, uint8_t* out, size_t out_size);

// zstd of a whole buffer (benchmark baselines).
size_t zstd_compressed_size(std::span<const uint8_t> in, int level);

}  // namespace deltacast
