// Marks functions that compile both for the host and, under nvcc, for the
// device. Code written this way is unit-tested on the CPU and runs unchanged
// inside CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define DC_HOST_DEVICE __host__ __device__
#define DC_DEVICE __device__
#else
#define DC_HOST_DEVICE
#define DC_DEVICE
#endif

// Unrolls the next loop under nvcc (constant indices keep small arrays in
// registers); host compilers choose for themselves.
#if defined(__CUDA_ARCH__)
#define DC_UNROLL _Pragma("unroll")
#else
#define DC_UNROLL
#endif
