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

  // Collective (see HostWarp): a shuffle scan.
  __device__ uint64_t exclusive_scan(uint64_t* data) const {
    const unsigned lane = threadIdx.x % kWarpSize;
    uint64_t inclusive = data[lane];
    for (unsigned d = 1; d < kWarpSize; d *= 2) {
      const uint64_t other = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive = add_saturating(other, inclusive);
    }
    const uint64_t exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    data[lane] = lane == 0 ? 0 : exclusive;
    const uint64_t total = __shfl_sync(0xffffffffu, inclusive, kWarpSize - 1);
    __syncwarp();
    return total;
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

  // Collective (see HostBlock): a shuffle scan within each warp, the warps' totals through shared
  // memory (one buffer per parity) and one barrier, after which each thread adds up the totals of
  // the warps before its own. Blocks of at most 32 warps.
  template <unsigned kThreads>
  __device__ uint32_t exclusive_scan(PerThread<uint32_t, kThreads>& value, unsigned parity) const {
    __shared__ uint32_t warp_total[2][32];
    const unsigned lane = threadIdx.x % kWarpSize;
    const unsigned warp = threadIdx.x / kWarpSize;
    const uint32_t mine = value[threadIdx.x];
    uint32_t inclusive = mine;
    for (unsigned d = 1; d < kWarpSize; d *= 2) {
      const uint32_t other = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += other;
    }
    if (lane == kWarpSize - 1) warp_total[parity][warp] = inclusive;
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (unsigned w = 0; w < blockDim.x / kWarpSize; ++w) {
      const uint32_t t = warp_total[parity][w];
      before += w < warp ? t : 0;
      total += t;
    }
    value[threadIdx.x] = before + inclusive - mine;
    return total;
  }
};

}  // namespace deltacast::simt
