// Tensors in GPU memory for deltacast-bench sync --device cuda: a rollout's resident weights, or
// the trainer's weights that the trace's host tensors are copied into before each publish. A CUDA
// build implements it over the CUDA runtime (device_tensors_cuda.cc); elsewhere allocate() says
// the build has none.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/manifest.h"
#include "core/tensor_view.h"

namespace deltacast::bench {

class DeviceTensors {
 public:
  // Device memory for `specs` on CUDA device `device`, filled with a NaN pattern (never zeros,
  // which would hide a version that wrote nothing).
  static Result<std::unique_ptr<DeviceTensors>> allocate(const std::vector<TensorSpec>& specs, int device);
  virtual ~DeviceTensors() = default;

  virtual std::span<const TensorView> views() const = 0;
  // Copies host tensors of the same specs in and waits for the copy.
  virtual Status upload(std::span<const TensorView> host) = 0;
};

}  // namespace deltacast::bench
