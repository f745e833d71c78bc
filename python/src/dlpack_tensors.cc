#include "dlpack_tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sparse/device_codec.h"
#include "status_errors.h"

namespace py = pybind11;

namespace deltacast::python {

namespace {

// DLPack type -> deltacast dtype; nullopt when deltacast has no such dtype.
std::optional<DType> dtype_of(const dlpack::DataType& t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case dlpack::kFloat:
      if (t.bits == 64) return DType::kF64;
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 16) return DType::kF16;
      return std::nullopt;
    case dlpack::kBfloat: return t.bits == 16 ? std::optional(DType::kBF16) : std::nullopt;
    case dlpack::kInt:
      if (t.bits == 8) return DType::kI8;
      if (t.bits == 16) return DType::kI16;
      if (t.bits == 32) return DType::kI32;
      if (t.bits == 64) return DType::kI64;
      return std::nullopt;
    case dlpack::kUInt: return t.bits == 8 ? std::optional(DType::kU8) : std::nullopt;
    case dlpack::kBool: return t.bits == 8 ? std::optional(DType::kBool) : std::nullopt;
    default: return std::nullopt;
  }
}

// Row-major and compact: every dimension longer than one steps by the product of those after it.
bool is_contiguous(const dlpack::Tensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

std::string describe_shape(const dlpack::Tensor& t, const int64_t* values) {
  return fmt::format("[{}]", fmt::join(values, values + t.ndim, ", "));
}

}  // namespace

ImportedTensors::ImportedTensors(const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                                 const std::vector<std::string>& dtypes) {
  if (names.size() != capsules.size() || (!dtypes.empty() && dtypes.size() != capsules.size())) {
    raise("InvalidArgumentError", "one name (and dtype) per tensor");
  }
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < capsules.size(); ++i) {
    const std::string& name = names[i];
    PyObject* cap = capsules[i].ptr();
    if (!PyCapsule_IsValid(cap, dlpack::kCapsuleName)) {
      raise("InvalidArgumentError", fmt::format("tensor '{}': not an unused DLPack capsule", name));
    }
    auto* managed = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleName));
    // From here on the capsule's memory is ours to release (DLPack's rule for consumers).
    PyCapsule_SetName(cap, dlpack::kUsedCapsuleName);
    owned_.tensors.push_back(managed);
    const dlpack::Tensor& t = managed->dl_tensor;
    Device device;  // host memory, pinned host memory included
    if (t.device.device_type == dlpack::kCuda) {
      if (!device_codec_built()) {
        raise("DeviceError", fmt::format("tensor '{}' is on CUDA device {}, and this build of deltacast has no CUDA "
                                         "kernels (built without nvcc): move it with .cpu()",
                                         name, t.device.device_id));
      }
      device = Device{DeviceKind::kCuda, t.device.device_id};
    } else if (t.device.device_type != dlpack::kCpu && t.device.device_type != dlpack::kCudaHost) {
      raise("DeviceError", fmt::format("tensor '{}' lives on a device of DLPack type {} (device {}); deltacast takes "
                                       "tensors in host memory or on CUDA GPUs",
                                       name, t.device.device_type, t.device.device_id));
    }
    auto dtype = dtype_of(t.dtype);
    if (!dtypes.empty() && !dtypes[i].empty()) {
      auto wanted = parse_dtype(dtypes[i]);
      if (!wanted.ok()) raise("DTypeError", fmt::format("tensor '{}': {}", name, wanted.status().message()));
      if (t.dtype.lanes != 1 || dtype_size(*wanted) * 8 != t.dtype.bits) {
        raise("DTypeError", fmt::format("tensor '{}': dtype {} needs {}-bit elements, the array has {}-bit ones",
                                        name, dtypes[i], dtype_size(*wanted) * 8, t.dtype.bits));
      }
      dtype = *wanted;
    }
    if (!dtype) {
      raise("DTypeError", fmt::format("tensor '{}' has a DLPack dtype (code {}, {} bits, {} lanes) deltacast does "
                                      "not carry; supported: float64/32/16, bfloat16, int8/16/32/64, uint8, bool",
                                      name, t.dtype.code, t.dtype.bits, t.dtype.lanes));
    }
    if (!is_contiguous(t)) {
      raise("NotContiguousError", fmt::format("tensor '{}' is not contiguous (shape {}, strides {}); pass "
                                              ".contiguous() or a compact copy that the caller keeps",
                                              name, describe_shape(t, t.shape), describe_shape(t, t.strides)));
    }
    TensorSpec spec{name, *dtype, {}};
    for (int32_t d = 0; d < t.ndim; ++d) spec.shape.push_back(static_cast<uint64_t>(t.shape[d]));
    views_.push_back(TensorView{static_cast<uint8_t*>(t.data) + t.byte_offset, *dtype, spec.numel(), device});
    specs.push_back(std::move(spec));
  }
  manifest_ = value_or_raise(Manifest::create(std::move(specs)));
}

ImportedTensors::Owned::~Owned() {
  for (dlpack::ManagedTensor* m : tensors) {
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  }
}

}  // namespace deltacast::python
