// Encodes one element range of one tensor into a chunk: sparse (PFOR gaps +
// raw or ulp values) when that is smaller than the dense bytes, dense
// otherwise, with the optional zstd stage on the body.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/byte_buffer.h"
#include "core/dtype.h"
#include "sparse/diff.h"
#include "sparse/value_codec.h"

namespace deltacast {

struct ChunkRange {
  uint32_t tensor_index = 0;
  DType dtype = DType::kU8;
  uint64_t element_start = 0;
  uint64_t element_count = 0;
};

// Per-thread buffers reused across chunks.
struct ChunkScratch {
  DiffResult diff;
  ByteBuffer body;
};

enum class EncodedAs { kNothing, kSparse, kDense };

// Appends the chunk for the changes in `diff` (positions relative to the
// range start). `current` points at the range's first element and is only
// read when the dense form wins. Appends nothing when nothing changed.
EncodedAs encode_delta_chunk(const ChunkRange& range, const uint8_t* current, const DiffResult& diff, ValueCodec codec,
                             int zstd_level, ChunkScratch* scratch, ByteBuffer* out);

// Appends a dense chunk holding the range's bytes (a full sync is all dense).
void encode_dense_chunk(const ChunkRange& range, const uint8_t* current, int zstd_level, ByteBuffer* out);

// Passes an uncompressed chunk through the zstd stage: the bytes the CPU
// encoder would have produced with that level (the GPU encoder's chunks get
// their zstd stage on the host this way).
void compress_chunk(std::span<const uint8_t> chunk, int zstd_level, ByteBuffer* out);

}  // namespace deltacast
