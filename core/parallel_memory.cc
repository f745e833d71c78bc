#include "core/parallel_memory.h"

#include <algorithm>
#include <cstring>

namespace deltacast {

namespace {
constexpr size_t kPieceBytes = kParallelPieceBytes;
constexpr size_t kPageBytes = 4096;

size_t pieces(size_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }
}  // namespace

void parallel_copy(uint8_t* dst, const uint8_t* src, size_t bytes, ThreadPool& pool) {
  pool.parallel_for(pieces(bytes), [&](size_t i) {
    const size_t at = i * kPieceBytes;
    std::memcpy(dst + at, src + at, std::min(kPieceBytes, bytes - at));
  });
}

void touch_pages(uint8_t* data, size_t bytes, ThreadPool& pool) {
  pool.parallel_for(pieces(bytes), [&](size_t i) {
    const size_t end = std::min(bytes, (i + 1) * kPieceBytes);
    // A store, not a load: a load of fresh memory maps the shared zero page and the
    // first real write faults again. volatile: the store of a zero must still be made.
    for (size_t at = i * kPieceBytes; at < end; at += kPageBytes) *static_cast<volatile uint8_t*>(data + at) = 0;
  });
}

}  // namespace deltacast
