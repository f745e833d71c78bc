#include "sparse/zstd_stage.h"

#include <zstd.h>

#include <memory>

namespace deltacast {

namespace {

struct CctxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxDeleter> ctx(ZSTD_createCCtx());
  return ctx.get();
}

ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace

bool zstd_compress_if_smaller(std::span<const uint8_t> in, int level, ByteBuffer* out) {
  const size_t at = out->size();
  const size_t bound = ZSTD_compressBound(in.size());
  uint8_t* dst = out->extend(bound);
  const size_t n = ZSTD_compressCCtx(thread_cctx(), dst, bound, in.data(), in.size(), level);
  if (ZSTD_isError(n) || n >= in.size()) {
    out->truncate(at);
    return false;
  }
  out->truncate(at + n);
  return true;
}

Status zstd_decompress_exact(std::span<const uint8_t> in, uint8_t* out, size_t out_size) {
  const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return corrupt("chunk body is not a zstd frame");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != out_size) {
    return corrupt("zstd frame declares {} bytes, the chunk header says {}", declared, out_size);
  }
  // The destination capacity bounds the output, so a forged frame cannot expand further.
  const size_t n = ZSTD_decompressDCtx(thread_dctx(), out, out_size, in.data(), in.size());
  if (ZSTD_isError(n)) return corrupt("zstd: {}", ZSTD_getErrorName(n));
  if (n != out_size) return corrupt("zstd frame expanded to {} bytes, the chunk header says {}", n, out_size);
  return Status();
}

size_t zstd_compressed_size(std::span<const uint8_t> in, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(in.size()));
  const size_t n = ZSTD_compressCCtx(thread_cctx(), out.data(), out.size(), in.data(), in.size(), level);
  return ZSTD_isError(n) ? in.size() : n;
}

}  // namespace deltacast
