// CUDA runtime errors as deltacast Status values.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace deltacast {

inline Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status();
  return internal_error("{}: CUDA error {} ({})", what, cudaGetErrorName(error), cudaGetErrorString(error));
}

// Number of usable CUDA devices; 0 when there is no driver or no device (any error counts as none).
inline int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
}

}  // namespace deltacast

#define DC_CUDA_RETURN_IF_ERROR(expr) DC_RETURN_IF_ERROR(::deltacast::cuda_status((expr), #expr))
