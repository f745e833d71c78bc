#include "core/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace deltacast {

namespace {
constexpr size_t kMmapThreshold = size_t{1} << 20;
}

AlignedBuffer::AlignedBuffer(size_t size) : size_(size) {
  if (size >= kMmapThreshold) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, size, MADV_HUGEPAGE);  // advisory: ignored where THP is off
    data_ = static_cast<uint8_t*>(p);
    mapped_ = size;
    return;
  }
  const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? kAlignment : rounded);
  data_ = static_cast<uint8_t*>(p);
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void AlignedBuffer::release() {
  if (data_ == nullptr) return;
  if (mapped_ > 0) {
    munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
}

}  // namespace deltacast
