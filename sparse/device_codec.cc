// What both builds share: where a set of tensors lives.
#include "sparse/device_codec.h"

namespace deltacast {

Result<std::optional<int>> cuda_device_of(const Manifest& manifest, std::span<const TensorView> tensors) {
  std::optional<size_t> first_cuda, first_host;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].device.is_cpu()) {
      if (!first_host) first_host = i;
      continue;
    }
    if (!first_cuda) {
      first_cuda = i;
    } else if (tensors[i].device.index != tensors[*first_cuda].device.index) {
      return invalid_argument("tensor '{}' is on CUDA device {} and tensor '{}' on CUDA device {}: the tensors of "
                              "one producer or consumer live on one GPU",
                              manifest[i].name, tensors[i].device.index, manifest[*first_cuda].name,
                              tensors[*first_cuda].device.index);
    }
  }
  if (!first_cuda) return std::optional<int>();
  if (first_host) {
    return invalid_argument("tensor '{}' is in host memory and tensor '{}' on CUDA device {}: the tensors of one "
                            "producer or consumer live all on one GPU or all in host memory",
                            manifest[*first_host].name, manifest[*first_cuda].name, tensors[*first_cuda].device.index);
  }
  return std::optional<int>(tensors[*first_cuda].device.index);
}

Status check_views_on_cuda(const Manifest& manifest, std::span<const TensorView> tensors, int device) {
  DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].device != Device{DeviceKind::kCuda, device}) {
      return invalid_argument("tensor '{}' is not on CUDA device {}", manifest[i].name, device);
    }
  }
  return Status();
}

}  // namespace deltacast
