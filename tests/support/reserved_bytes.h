// A large zeroed byte range whose pages become memory only when written:
// for tests of positions beyond 2^32 that touch a few elements of a tensor
// too big to fill.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace deltacast::testing {

class ReservedBytes {
 public:
  explicit ReservedBytes(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~ReservedBytes() {
    if (data_) munmap(data_, bytes_);
  }
  ReservedBytes(const ReservedBytes&) = delete;
  ReservedBytes& operator=(const ReservedBytes&) = delete;

  bool ok() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_ = nullptr;
};

}  // namespace deltacast::testing
