// The DLPack exchange structures (the stable, versionless ABI that
// `__dlpack__()` capsules named "dltensor" carry), declared here so that the
// extension needs no framework's headers.
#pragma once

#include <cstdint>

namespace deltacast::python::dlpack {

enum DeviceType : int32_t { kCpu = 1, kCuda = 2, kCudaHost = 3, kCudaManaged = 13 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace deltacast::python::dlpack
