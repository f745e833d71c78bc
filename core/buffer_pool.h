// Large buffers reused across versions. A fresh multi-hundred-MiB buffer is
// paid for in page faults when first touched (the kernel zeroes every page);
// staging a full sync every few versions into new memory would cost more
// than moving the bytes. Buffers come back to the pool when the last
// shared_ptr to them goes, and the pool keeps the largest few.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "core/aligned_buffer.h"

namespace deltacast {

class BufferPool {
 public:
  explicit BufferPool(size_t keep = 2);

  // A buffer of at least `bytes` (size() may be larger). A reused buffer holds old bytes.
  std::shared_ptr<AlignedBuffer> acquire(size_t bytes);
  size_t idle() const;

 private:
  struct Shared {
    std::mutex mu;
    std::vector<AlignedBuffer> free;
    size_t keep = 2;
  };
  std::shared_ptr<Shared> shared_;
};

}  // namespace deltacast
