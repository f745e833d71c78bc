// DeviceTensors over the CUDA runtime.
#include <cuda_runtime_api.h>

#include "sync/device_tensors.h"
#include "sparse/cuda/cuda_check.h"
#include "sparse/cuda/device_buffer.h"

namespace deltacast::bench {

namespace {

class CudaTensors final : public DeviceTensors {
 public:
  Status init(const std::vector<TensorSpec>& specs, int device) {
    if (cuda_device_count() <= device) return unavailable("no CUDA device {}", device);
    DC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    for (const TensorSpec& spec : specs) {
      buffers_.emplace_back();
      const uint64_t bytes = spec.numel() * dtype_size(spec.dtype);
      DC_RETURN_IF_ERROR(buffers_.back().reserve(bytes));
      DC_CUDA_RETURN_IF_ERROR(cudaMemset(buffers_.back().data(), 0xFF, bytes));  // all-ones bits: NaN for floats
      views_.push_back(TensorView{buffers_.back().data(), spec.dtype, spec.numel(), Device{DeviceKind::kCuda, device}});
    }
    DC_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return Status();
  }

  std::span<const TensorView> views() const override { return views_; }

  Status upload(std::span<const TensorView> host) override {
    if (host.size() != views_.size()) return invalid_argument("{} tensors for {}", host.size(), views_.size());
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i].nbytes() != views_[i].nbytes()) {
        return invalid_argument("tensor {}: {} bytes for {}", i, host[i].nbytes(), views_[i].nbytes());
      }
      DC_CUDA_RETURN_IF_ERROR(cudaMemcpy(views_[i].data, host[i].data, host[i].nbytes(), cudaMemcpyHostToDevice));
    }
    return Status();
  }

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<TensorView> views_;
};

}  // namespace

Result<std::unique_ptr<DeviceTensors>> DeviceTensors::allocate(const std::vector<TensorSpec>& specs, int device) {
  auto tensors = std::make_unique<CudaTensors>();
  DC_RETURN_IF_ERROR(tensors->init(specs, device));
  std::unique_ptr<DeviceTensors> out = std::move(tensors);
  return out;
}

}  // namespace deltacast::bench
