// Memory passes over large buffers split across a thread pool: on a machine
// whose single core cannot saturate memory bandwidth, a copy of a model or the
// first touch of a fresh buffer goes several times faster on every core.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace deltacast {

// The unit of parallel memory work: large enough that a copy runs at memory speed, small enough
// to spread a model over every thread (and a whole number of content-hash leaves, core/hash.h).
inline constexpr size_t kParallelPieceBytes = 4 << 20;

// memcpy(dst, src, bytes) in pieces spread over `pool`; the ranges must not overlap.
void parallel_copy(uint8_t* dst, const uint8_t* src, size_t bytes, ThreadPool& pool);

// Writes a zero into the first byte of every page of [data, data + bytes):
// for fresh anonymous memory (which reads as zero anyway) the kernel maps
// every page now, on every core, rather than one fault at a time when the
// first version lands there. Not for memory holding anything.
void touch_pages(uint8_t* data, size_t bytes, ThreadPool& pool);

}  // namespace deltacast
