// Diff of current tensor bytes against the shadow, by bit pattern.
//
// Floats are never compared as floats: NaN != NaN and -0.0 == +0.0 would lose
// changes. The same pass copies every changed element into the shadow, so the
// shadow becomes the new version without a second pass over memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/scratch_buffer.h"

namespace deltacast {

// Changed elements of one range: position relative to the range start and the
// old and new bit patterns (zero-extended to 64 bits).
struct DiffResult {
  ScratchBuffer<uint64_t> positions;
  ScratchBuffer<uint64_t> old_bits;
  ScratchBuffer<uint64_t> new_bits;
  size_t count = 0;
};

// kBest picks the vector path the CPU supports (AVX2 on x86-64); kPortable
// forces the plain 64-bit-word path, so tests can check both on one machine.
enum class DiffPath { kBest, kPortable };

// Compares `count` elements of `elem_size` bytes (1, 2, 4 or 8), records every
// element whose bits differ, and writes current into shadow for them.
void diff_and_update(const uint8_t* current, uint8_t* shadow, uint64_t count, unsigned elem_size, DiffResult* out,
                     DiffPath path = DiffPath::kBest);

// The plain element-by-element loop the fast path is tested against.
void diff_and_update_reference(const uint8_t* current, uint8_t* shadow, uint64_t count, unsigned elem_size,
                               DiffResult* out);

}  // namespace deltacast
