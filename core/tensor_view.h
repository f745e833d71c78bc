// A non-owning view of one tensor's memory: pointer, dtype, element count and
// the device the memory lives on. Shapes live in the Manifest; the codec only
// needs the flat element range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace deltacast {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  friend bool operator==(const Device&, const Device&) = default;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kU8;
  uint64_t numel = 0;
  Device device{};

  uint64_t nbytes() const { return numel * dtype_size(dtype); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data); }
};

using ByteSpan = std::span<const uint8_t>;
using MutableByteSpan = std::span<uint8_t>;

}  // namespace deltacast
