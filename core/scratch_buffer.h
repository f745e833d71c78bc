// A reusable array that grows without initialising its elements. Per-thread
// codec scratch is written only where something changed (about 1% of a
// chunk); zero-filling it, or sizing it for the worst case up front, would
// cost memory passes and address space for nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

namespace deltacast {

template <typename T>
class ScratchBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  // Makes room for `n` elements; existing contents are not preserved.
  T* reserve(size_t n) {
    if (n > capacity_) {
      data_.reset(new T[n]);  // default-initialised: no zero fill for trivial T
      capacity_ = n;
    }
    return data_.get();
  }
  // Makes room for `n` elements keeping the first `keep`; grows geometrically.
  T* grow(size_t n, size_t keep) {
    if (n > capacity_) {
      const size_t capacity = std::max(n, capacity_ * 2);
      std::unique_ptr<T[]> bigger(new T[capacity]);
      if (keep > 0) std::memcpy(bigger.get(), data_.get(), keep * sizeof(T));
      data_ = std::move(bigger);
      capacity_ = capacity;
    }
    return data_.get();
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

}  // namespace deltacast
