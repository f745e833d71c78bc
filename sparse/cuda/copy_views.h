// Tensor-for-tensor copies between views in any memory the device reaches
// (its own, pinned or mapped host memory), on one stream.
#pragma once

#include <span>

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "core/tensor_view.h"
#include "sparse/cuda/cuda_check.h"

namespace deltacast {

// Copies every src[i] into dst[i] on `stream` and waits for it.
inline Status copy_views(std::span<const TensorView> dst, std::span<const TensorView> src, cudaStream_t stream) {
  if (dst.size() != src.size()) return invalid_argument("{} tensors to copy into {}", src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (dst[i].nbytes() != src[i].nbytes()) {
      return invalid_argument("tensor {}: {} bytes to copy into {} bytes", i, src[i].nbytes(), dst[i].nbytes());
    }
    DC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst[i].data, src[i].data, src[i].nbytes(), cudaMemcpyDefault, stream));
  }
  DC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status();
}

}  // namespace deltacast
