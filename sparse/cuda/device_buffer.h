// Owning device and pinned host allocations. Both grow on request and keep
// their memory between calls, so steady-state encoding allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "sparse/cuda/cuda_check.h"

namespace deltacast {

template <bool kPinnedHost>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  ~CudaBuffer() { release(); }
  CudaBuffer(CudaBuffer&& other) noexcept { take(other); }
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  // Makes room for `bytes`; contents are not preserved when it grows.
  Status reserve(size_t bytes) {
    if (bytes <= capacity_) return Status();
    release();
    void* p = nullptr;
    const size_t size = bytes == 0 ? 1 : bytes;
    DC_RETURN_IF_ERROR(cuda_status(kPinnedHost ? cudaMallocHost(&p, size) : cudaMalloc(&p, size),
                                   kPinnedHost ? "cudaMallocHost" : "cudaMalloc"));
    data_ = static_cast<uint8_t*>(p);
    capacity_ = size;
    return Status();
  }
  // For memory sized by each call's data (a version's buckets): grows with half again as much
  // room, so that versions a little larger than any before do not allocate (pinned memory costs
  // tens of milliseconds per allocation of a version's size).
  Status grow(size_t bytes) { return bytes <= capacity_ ? Status() : reserve(bytes + bytes / 2); }
  uint8_t* data() const { return data_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  size_t capacity() const { return capacity_; }

 private:
  void take(CudaBuffer& other) {
    data_ = other.data_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.capacity_ = 0;
  }
  void release() {
    if (data_ == nullptr) return;
    if (kPinnedHost) {
      cudaFreeHost(data_);
    } else {
      cudaFree(data_);
    }
    data_ = nullptr;
    capacity_ = 0;
  }

  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

using DeviceBuffer = CudaBuffer<false>;
using PinnedBuffer = CudaBuffer<true>;

}  // namespace deltacast
