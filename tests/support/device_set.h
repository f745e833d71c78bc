// Device copies of a TensorSet for the GPU tests, each with guard bytes on both sides (a write
// outside a tensor shows as a changed guard).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "sparse/cuda/device_buffer.h"
#include "support/test_tensors.h"

namespace deltacast::testing {

class DeviceSet {
 public:
  static constexpr size_t kGuard = 256;
  static constexpr uint8_t kGuardByte = 0xA5;

  explicit DeviceSet(const TensorSet& host) {
    for (const auto& t : host.tensors) {
      buffers_.emplace_back();
      DeviceBuffer& b = buffers_.back();
      EXPECT_TRUE(b.reserve(t.nbytes() + 2 * kGuard).ok());
      EXPECT_EQ(cudaMemset(b.data(), kGuardByte, t.nbytes() + 2 * kGuard), cudaSuccess);
      const TensorView v = t.view();
      views_.push_back(TensorView{b.data() + kGuard, v.dtype, v.numel, Device{DeviceKind::kCuda, 0}});
    }
    upload(host);
  }
  void upload(const TensorSet& host) {
    for (size_t i = 0; i < views_.size(); ++i) {
      EXPECT_EQ(cudaMemcpy(views_[i].data, host.tensors[i].data(), host.tensors[i].nbytes(), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  void download(TensorSet& host) const {
    for (size_t i = 0; i < views_.size(); ++i) {
      EXPECT_EQ(cudaMemcpy(host.tensors[i].data(), views_[i].data, host.tensors[i].nbytes(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
  }
  bool guards_intact() const {
    for (size_t i = 0; i < views_.size(); ++i) {
      std::vector<uint8_t> bytes(views_[i].nbytes() + 2 * kGuard);
      cudaMemcpy(bytes.data(), buffers_[i].data(), bytes.size(), cudaMemcpyDeviceToHost);
      for (size_t k = 0; k < kGuard; ++k) {
        if (bytes[k] != kGuardByte || bytes[bytes.size() - 1 - k] != kGuardByte) return false;
      }
    }
    return true;
  }
  std::span<const TensorView> views() const { return views_; }

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<TensorView> views_;
};

}  // namespace deltacast::testing
