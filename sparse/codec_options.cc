#include "sparse/codec_options.h"

#include "sparse/zstd_stage.h"

namespace deltacast {

Status CodecOptions::validate() const {
  if (zstd_level < kMinZstdLevel || zstd_level > kMaxZstdLevel) {
    return invalid_argument("zstd level {} outside [{}, {}]", zstd_level, kMinZstdLevel, kMaxZstdLevel);
  }
  if (chunk_bytes == 0) return invalid_argument("chunk_bytes must be positive");
  if (bucket_bytes < 4096) return invalid_argument("bucket_bytes {} is below the 4096-byte minimum", bucket_bytes);
  if (threads > 4096) return invalid_argument("{} threads is not a sensible count", threads);
  return Status();
}

}  // namespace deltacast
