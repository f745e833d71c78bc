// Device versions of the execution contexts in simt.h: the lanes of a phase
// run in parallel and sync() is a real barrier.
#pragma once

#include "sparse/cuda/simt.h"

namespace deltacast::simt {

struct DeviceWarp {
  template <typename F>
  __device__ void lanes(F&& f) const {
    f(threadIdx.x % kWarpSize);
  }
  __device__ void sync() const { __syncwarp(); }
  template <typename T>
  __device__ T atomic_add(T* p, T v) const {
    return atomicAdd(p, v);
  }
  template <typename T>
  __device__ T atomic_cas(T* p, T expected, T desired) const {
    return atomicCAS(p, expected, desired);
  }
};

struct DeviceBlock {
  __device__ unsigned warps() const { return blockDim.x / kWarpSize; }
  template <typename F>
  __device__ void each_thread(F&& f) const {
    f(threadIdx.x);
  }
  template <typename F>
  __device__ void each_warp(F&& f) const {
    f(threadIdx.x / kWarpSize, DeviceWarp{});
  }
  __device__ void sync() const { __syncthreads(); }
};

}  // namespace deltacast::simt
