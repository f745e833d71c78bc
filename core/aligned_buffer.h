// Zero-filled heap memory aligned to a cache line, for tensor copies (shadow,
// staging). Large buffers come straight from mmap: the kernel hands out zero
// pages lazily, so nothing is written twice, and transparent huge pages cut
// the page-fault count when the buffer is first touched.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltacast {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mmapped, 0 when the buffer came from aligned_alloc
};

}  // namespace deltacast
