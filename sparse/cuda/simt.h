// Execution contexts for kernel code written once for CUDA and for the host.
//
// Kernel logic is a sequence of phases: "every lane (or thread) runs this",
// then a sync. Lanes of one phase talk only through shared memory and
// atomics. On the device (simt_device.cuh) the lanes of a phase run in
// parallel; the host contexts below run them one after another, which gives
// the same result for code that follows these rules. That is how the GPU
// kernels' logic is unit-tested byte for byte against the CPU codec on
// machines without a GPU. Values that live across phases are kept in
// shared per-lane arrays or in PerThread, never in a lambda's locals.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace deltacast::simt {

inline constexpr unsigned kWarpSize = 32;

// a + b, or the largest value when that overflows. Associative, so scans may
// group the additions any way: sums of untrusted gaps cannot wrap around.
DC_HOST_DEVICE inline uint64_t add_saturating(uint64_t a, uint64_t b) {
  const uint64_t sum = a + b;
  return sum < a ? ~uint64_t{0} : sum;
}

// A value each thread carries from one phase to a later one, such as loads issued ahead of their
// use. On the device each thread holds its own in registers; the host contexts run the threads one
// after another, so there it is an array indexed by the thread.
template <typename T, unsigned kThreads>
struct PerThread {
#if defined(__CUDA_ARCH__)
  T value;
  DC_DEVICE T& operator[](unsigned) { return value; }
#else
  T values[kThreads];
  T& operator[](unsigned t) { return values[t]; }
#endif
};

// One warp, lanes run in order.
struct HostWarp {
  template <typename F>
  void lanes(F&& f) const {
    for (unsigned lane = 0; lane < kWarpSize; ++lane) f(lane);
  }
  void sync() const {}
  template <typename T>
  T atomic_add(T* p, T v) const {
    const T old = *p;
    *p = old + v;
    return old;
  }
  template <typename T>
  T atomic_cas(T* p, T expected, T desired) const {
    const T old = *p;
    if (old == expected) *p = desired;
    return old;
  }

  // Collective: replaces data[0, 32) (one value per lane) with its exclusive
  // prefix sums (add_saturating) and returns the total to every lane. Called
  // by all lanes, between phases.
  uint64_t exclusive_scan(uint64_t* data) const {
    uint64_t total = 0;
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
      const uint64_t v = data[lane];
      data[lane] = total;
      total = add_saturating(total, v);
    }
    return total;
  }
};

// A block of `threads` threads (a multiple of 32): phases over every thread,
// or over every warp, one after another.
struct HostBlock {
  unsigned threads;

  unsigned warps() const { return threads / kWarpSize; }
  template <typename F>
  void each_thread(F&& f) const {
    for (unsigned t = 0; t < threads; ++t) f(t);
  }
  template <typename F>
  void each_warp(F&& f) const {
    for (unsigned w = 0; w < warps(); ++w) f(w, HostWarp{});
  }
  void sync() const {}

  // Collective: replaces each thread's value with the sum of the values of the threads before it
  // and returns the total to every thread. Called by all threads, between phases. It holds one
  // barrier and no shared memory a later phase could still be reading, so that consecutive scans
  // need no barrier between them when they alternate `parity` (0 and 1): a scan reads its warp
  // totals after its barrier, and the next scan of the same parity writes them only after the
  // barrier of the scan between, which every thread reaches after that read.
  template <unsigned kThreads>
  uint32_t exclusive_scan(PerThread<uint32_t, kThreads>& value, unsigned /*parity*/) const {
    uint32_t total = 0;
    for (unsigned t = 0; t < threads; ++t) {
      const uint32_t v = value[t];
      value[t] = total;
      total += v;
    }
    return total;
  }
};

}  // namespace deltacast::simt
