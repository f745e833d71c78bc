// Knobs of the encoder. Both ends need nothing of this to decode: every chunk
// and bucket describes itself.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "sparse/value_codec.h"

namespace deltacast {

struct CodecOptions {
  ValueCodec value_codec = ValueCodec::kUlp;
  int zstd_level = 0;                  // 0: no zstd stage
  uint64_t chunk_bytes = 2ull << 20;   // dense size of one chunk: the unit of parallel work
  uint64_t bucket_bytes = 4ull << 20;  // buckets are cut at this payload size (a larger chunk goes alone)
  unsigned threads = 0;                // 0: one per hardware thread

  Status validate() const;
};

// Elements per chunk for a dtype: chunks cover the same bytes whatever the width.
inline uint64_t chunk_elements(const CodecOptions& options, DType dtype) {
  const uint64_t n = options.chunk_bytes / dtype_size(dtype);
  return n == 0 ? 1 : n;
}

}  // namespace deltacast
