// A growable byte array whose growth does not zero-fill. Encoders reserve a
// worst-case block, write into it and give back what they did not use;
// std::vector::resize would clear every reserved byte first, which on the
// encode path cost as much as the encoding itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace deltacast {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&&) noexcept = default;
  ByteBuffer& operator=(ByteBuffer&&) noexcept = default;

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const uint8_t> span() const { return {data_.get(), size_}; }

  void clear() { size_ = 0; }
  // Grows by `n` bytes left uninitialised; returns where they start.
  uint8_t* extend(size_t n) {
    reserve(size_ + n);
    uint8_t* at = data_.get() + size_;
    size_ += n;
    return at;
  }
  // Shrinks to `n` bytes (n <= size()).
  void truncate(size_t n) { size_ = n; }
  void append(const void* bytes, size_t n) {
    if (n > 0) std::memcpy(extend(n), bytes, n);
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t capacity = capacity_ < 256 ? 256 : capacity_ * 2;
    while (capacity < n) capacity *= 2;
    std::unique_ptr<uint8_t[]> bigger(new uint8_t[capacity]);
    if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = capacity;
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace deltacast
