// One chunk diffed and encoded by one thread block, in a single pass over
// the current tensor and the shadow: each tile's changes are compacted into
// a pending list in shared memory (positions, old and new bits), the shadow
// is updated where they changed, and every 128 pending changes become one
// group (FORMAT.md), encoded by a warp straight into the chunk's output
// region. When the sparse body stops being smaller than the dense bytes the
// block stops encoding, finishes the diff, and writes the chunk dense.
// Produces exactly the bytes of the CPU encoder (encode_delta_chunk without
// zstd); the host tests check that through simt::HostBlock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "sparse/cuda/pfor_warp.h"
#include "sparse/format.h"
#include "sparse/value_codec.h"

namespace deltacast::simt {

inline constexpr unsigned kEncodeThreads = 128;
inline constexpr unsigned kEncodeWarps = kEncodeThreads / kWarpSize;

// One chunk to encode. Pointers are device addresses on the GPU.
struct EncodeJob {
  const uint8_t* current;  // the range's first element
  uint8_t* shadow;         // the shadow's element at the same position
  uint8_t* out;            // output region: ChunkHeader::kBytes + dense bytes + padding
  uint64_t* out_size;      // bytes of the chunk written at `out` (0: nothing changed)
  uint64_t* changed;       // changed elements, for statistics
  uint64_t element_start;
  uint32_t element_count;  // below 2^32 (the GPU encoder checks the chunk size)
  uint32_t tensor_index;
  uint8_t value_codec;     // the effective codec for this dtype
};

// Each thread reads two 16-byte runs of the current tensor and of the shadow per tile: wide loads
// and more bytes in flight per thread, and half the block barriers per byte of one run.
inline constexpr unsigned kEncodeRunBytes = 32;


template <typename U>
struct EncodeShared {
  static constexpr unsigned kPerThread = kEncodeRunBytes / sizeof(U);
  static constexpr unsigned kTile = kEncodeThreads * kPerThread;
  // Groups are encoded once a group per warp is pending, so that every warp encodes one while
  // the block waits (flushing at 128 kept three of four warps idle through each flush).
  // (Two groups per warp measured slower on an H100: the larger pending list costs occupancy.)
  static constexpr unsigned kFlushAt = kEncodeWarps * kPforBlockValues;
  static constexpr unsigned kPendingCap = kTile + kFlushAt;
  static constexpr unsigned kMaxGroups = kPendingCap / kPforBlockValues + 1;

  uint32_t position[kPendingCap];  // relative to the chunk start
  U old_bits[kPendingCap];
  U new_bits[kPendingCap];
  uint64_t warp_values[kEncodeWarps][kPforBlockValues];
  PforWarpScratch warp_scratch[kEncodeWarps];
  uint32_t group_bytes[kMaxGroups];
  uint64_t group_at[kMaxGroups];
  uint32_t pending;
  uint32_t next_position;  // smallest position the next change may have (the first gap's base)
  uint64_t body_bytes;
  uint32_t groups;
  uint32_t consumed;
  bool overflow;  // the sparse body reached the dense size: the chunk goes dense
};

// Gaps (into warp_values) of pending changes [first, first + n).
template <typename U, typename Warp>
DC_HOST_DEVICE void load_gaps(const Warp& x, EncodeShared<U>& s, unsigned w, unsigned first, unsigned n) {
  x.lanes([&](unsigned lane) {
    for (unsigned k = lane; k < n; k += kWarpSize) {
      const unsigned i = first + k;
      const uint32_t base = i == 0 ? s.next_position : s.position[i - 1] + 1;
      s.warp_values[w][k] = s.position[i] - base;
    }
  });
  x.sync();
}

template <typename U, typename Warp>
DC_HOST_DEVICE void load_ulp_values(const Warp& x, EncodeShared<U>& s, unsigned w, unsigned first, unsigned n) {
  x.lanes([&](unsigned lane) {
    for (unsigned k = lane; k < n; k += kWarpSize) {
      s.warp_values[w][k] = ulp_encode(s.old_bits[first + k], s.new_bits[first + k], sizeof(U) * 8);
    }
  });
  x.sync();
}

// Size of group g (pending changes [128g, 128g + n)), or, with `out`, its bytes written there.
template <typename U, typename Warp>
DC_HOST_DEVICE size_t group_encode(const Warp& x, EncodeShared<U>& s, unsigned w, unsigned g, bool ulp, uint8_t* out) {
  const unsigned first = g * kPforBlockValues;
  const unsigned n = s.pending - first < kPforBlockValues ? s.pending - first : kPforBlockValues;
  load_gaps(x, s, w, first, n);
  size_t bytes = out ? warp_pfor_encode(x, s.warp_values[w], n, out, s.warp_scratch[w])
                     : warp_pfor_layout(x, s.warp_values[w], n, s.warp_scratch[w]).bytes;
  if (ulp) {
    load_ulp_values(x, s, w, first, n);
    bytes += out ? warp_pfor_encode(x, s.warp_values[w], n, out + bytes, s.warp_scratch[w])
                 : warp_pfor_layout(x, s.warp_values[w], n, s.warp_scratch[w]).bytes;
  } else {
    if (out) {
      uint8_t* raw = out + bytes;
      x.lanes([&](unsigned lane) {
        for (unsigned k = lane; k < n * sizeof(U); k += kWarpSize) {
          raw[k] = static_cast<uint8_t>(static_cast<uint64_t>(s.new_bits[first + k / sizeof(U)]) >> (8 * (k % sizeof(U))));
        }
      });
      x.sync();
    }
    bytes += n * sizeof(U);
  }
  return bytes;
}

// Encodes the groups that are complete (all remaining ones when `final`).
template <typename U, typename Block>
DC_HOST_DEVICE void flush_groups(const Block& x, EncodeShared<U>& s, const EncodeJob& job, bool final,
                                 uint64_t dense_bytes) {
  const bool ulp = job.value_codec == static_cast<uint8_t>(ValueCodec::kUlp);
  x.each_thread([&](unsigned t) {
    if (t != 0) return;
    s.groups = final ? (s.pending + kPforBlockValues - 1) / kPforBlockValues : s.pending / kPforBlockValues;
    s.consumed = s.groups * kPforBlockValues < s.pending ? s.groups * kPforBlockValues : s.pending;
  });
  x.sync();
  if (s.groups == 0) return;
  if (!s.overflow) {
    // Sizes first, so that groups can be written in parallel at known offsets.
    x.each_warp([&](unsigned w, const auto& wx) {
      for (unsigned g = w; g < s.groups; g += kEncodeWarps) {
        const size_t bytes = group_encode(wx, s, w, g, ulp, nullptr);
        wx.lanes([&](unsigned lane) {
          if (lane == 0) s.group_bytes[g] = static_cast<uint32_t>(bytes);
        });
        wx.sync();
      }
    });
    x.sync();
    x.each_thread([&](unsigned t) {
      if (t != 0) return;
      uint64_t at = s.body_bytes;
      for (unsigned g = 0; g < s.groups; ++g) {
        s.group_at[g] = at;
        at += s.group_bytes[g];
      }
      if (at > dense_bytes) {
        s.overflow = true;  // the sparse body is not smaller than dense: stop encoding, write dense
      } else {
        s.body_bytes = at;
      }
    });
    x.sync();
    if (!s.overflow) {
      x.each_warp([&](unsigned w, const auto& wx) {
        for (unsigned g = w; g < s.groups; g += kEncodeWarps) {
          group_encode(wx, s, w, g, ulp, job.out + ChunkHeader::kBytes + s.group_at[g]);
        }
      });
      x.sync();
    }
  }
  // The next group's first gap counts from just after the last consumed change.
  x.each_thread([&](unsigned t) {
    if (t == 0) s.next_position = s.position[s.consumed - 1] + 1;
  });
  x.sync();
  // The changes not yet in a group move to the front (they sit after the consumed ones, which
  // are at least kFlushAt >= 128 when any are left, so the copy never reads a slot it already overwrote).
  const unsigned left = s.pending - s.consumed;
  x.each_thread([&](unsigned t) {
    for (unsigned i = t; i < left; i += kEncodeThreads) {
      s.position[i] = s.position[s.consumed + i];
      s.old_bits[i] = s.old_bits[s.consumed + i];
      s.new_bits[i] = s.new_bits[s.consumed + i];
    }
  });
  x.sync();
  x.each_thread([&](unsigned t) {
    if (t == 0) s.pending = left;
  });
  x.sync();
}

// Loads the run of kPer elements at p[first, first + kPer) clipped to `count` into `out`, with
// 16-byte loads on the device where the run is whole and aligned; returns how many are valid.
template <typename U, unsigned kPer>
DC_HOST_DEVICE unsigned load_run(const U* p, uint64_t first, uint64_t count, U (&out)[kPer]) {
  static_assert(kPer * sizeof(U) % 16 == 0);
  const unsigned n = first >= count ? 0 : count - first < kPer ? static_cast<unsigned>(count - first) : kPer;
#if defined(__CUDA_ARCH__)
  if (n == kPer && reinterpret_cast<uintptr_t>(p + first) % 16 == 0) {
    const auto* v = reinterpret_cast<const uint4*>(p + first);
    for (unsigned q = 0; q < kPer * sizeof(U) / 16; ++q) reinterpret_cast<uint4*>(out)[q] = v[q];
    return n;
  }
#endif
DC_UNROLL
  for (unsigned k = 0; k < kPer; ++k) out[k] = k < n ? p[first + k] : U{};
  return n;
}

// Writes the first n elements of `run` to p[first, ...), as whole 16-byte stores where possible.
template <typename U, unsigned kPer>
DC_HOST_DEVICE void store_run(U* p, uint64_t first, unsigned n, const U (&run)[kPer]) {
#if defined(__CUDA_ARCH__)
  if (n == kPer && reinterpret_cast<uintptr_t>(p + first) % 16 == 0) {
    auto* v = reinterpret_cast<uint4*>(p + first);
    for (unsigned q = 0; q < kPer * sizeof(U) / 16; ++q) v[q] = reinterpret_cast<const uint4*>(run)[q];
    return;
  }
#endif
DC_UNROLL
  for (unsigned k = 0; k < kPer; ++k) {
    if (k < n) p[first + k] = run[k];
  }
}

// Diffs and encodes one chunk (EncodeJob) with one block of kEncodeThreads.
//
// A tile without a flush holds one barrier (its scan's): each thread keeps its change count and
// first slot in registers, and the pending count is kept by every thread alike, so nothing in
// shared memory is read by one thread after another wrote it in the same tile. A tile's records go
// to slots after every earlier tile's, so a warp that runs a tile ahead writes other slots; the
// pending list is read only by flushes, which start with a barrier.
template <typename U, typename Block>
DC_HOST_DEVICE void encode_chunk(const Block& x, EncodeShared<U>& s, const EncodeJob& job) {
  constexpr unsigned kPer = EncodeShared<U>::kPerThread;
  constexpr unsigned kTile = EncodeShared<U>::kTile;
  const U* cur = reinterpret_cast<const U*>(job.current);
  U* sh = reinterpret_cast<U*>(job.shadow);
  const uint64_t count = job.element_count;
  const uint64_t dense_bytes = count * sizeof(U);
  x.each_thread([&](unsigned t) {
    if (t != 0) return;
    s.pending = 0;
    s.next_position = 0;
    s.body_bytes = 0;
    s.overflow = false;
  });
  x.sync();
  // Every thread holds the same values (the scans return the tile's total to all).
  uint32_t pending = 0;
  uint32_t changed = 0;  // below the chunk's count, itself below 2^32
  // Each thread's run of the next tile is loaded while the block scans, records and encodes the
  // current one: the loads are in flight through those phases instead of the block waiting for
  // them at the top of every tile (Nsight Compute: 28 warps per SM at most, a quarter of DRAM
  // throughput, so the kernel waited on memory with few bytes in flight).
  struct Run {
    alignas(16) U c[kPer];
    alignas(16) U old[kPer];
    unsigned n;
  };
  PerThread<Run, kEncodeThreads> ahead;
  PerThread<uint32_t, kEncodeThreads> changes;  // the thread's changes in this tile
  PerThread<uint32_t, kEncodeThreads> slot;     // where the first of them goes, after the scan
  x.each_thread([&](unsigned t) {
    Run& r = ahead[t];
    r.n = load_run<U, kPer>(cur, t * kPer, count, r.c);
    load_run<U, kPer>(sh, t * kPer, count, r.old);
  });
  for (uint64_t tile = 0; tile < count; tile += kTile) {
    // Each thread counts the changes among its kPer elements, then loads its run of the next tile...
    x.each_thread([&](unsigned t) {
      Run& r = ahead[t];
      uint32_t n_changes = 0;
DC_UNROLL
      for (unsigned k = 0; k < kPer; ++k) n_changes += k < r.n && r.c[k] != r.old[k];
      changes[t] = n_changes;
      slot[t] = n_changes;
      const uint64_t next = tile + kTile + t * kPer;
      if (tile + kTile < count) {
        r.n = load_run<U, kPer>(cur, next, count, r.c);
        load_run<U, kPer>(sh, next, count, r.old);
      }
    });
    // ...a scan turns counts into slots in the pending list...
    const uint32_t tile_changes = x.exclusive_scan(slot, static_cast<unsigned>(tile / kTile) & 1u);
    // ...where each thread with changes reads its run again (from cache: it was just read) to record
    // them and update the shadow (most have none; the next tile's run stays in flight meanwhile).
    x.each_thread([&](unsigned t) {
      if (changes[t] == 0) return;
      const uint64_t first = tile + t * kPer;
      alignas(16) U c[kPer];
      alignas(16) U old[kPer];
      const unsigned n = load_run<U, kPer>(cur, first, count, c);
      load_run<U, kPer>(sh, first, count, old);
      uint32_t j = pending + slot[t];
      // No more than counted, even if the tensor changed since (written while it is encoded, which
      // is misuse): the slots after these are another thread's, and the list has no more room.
      const uint32_t end = j + changes[t];
DC_UNROLL
      for (unsigned k = 0; k < kPer; ++k) {  // to kPer, not n: constant indices keep the runs in registers
        if (k >= n || c[k] == old[k] || j == end) continue;
        s.position[j] = static_cast<uint32_t>(first + k);
        s.old_bits[j] = old[k];
        s.new_bits[j] = c[k];
        ++j;
      }
      store_run<U, kPer>(sh, first, n, c);
    });
    pending += tile_changes;
    changed += tile_changes;
    const bool final = tile + kTile >= count;
    if (pending >= EncodeShared<U>::kFlushAt || (final && pending > 0)) {
      // The barrier after which the list is whole; flush_groups leaves what it did not consume.
      x.each_thread([&](unsigned t) {
        if (t == 0) s.pending = pending;
      });
      x.sync();
      flush_groups(x, s, job, final, dense_bytes);
      pending = s.pending;
    }
  }
  // Header, and the dense bytes when sparse did not pay.
  const bool dense = s.overflow || s.body_bytes >= dense_bytes;
  const uint64_t body = dense ? dense_bytes : s.body_bytes;
  if (changed > 0 && dense) {
    x.each_thread([&](unsigned t) {
      for (uint64_t k = t; k < dense_bytes; k += kEncodeThreads) job.out[ChunkHeader::kBytes + k] = job.current[k];
    });
  }
  x.each_thread([&](unsigned t) {
    if (t != 0) return;
    *job.changed = changed;
    if (changed == 0) {
      *job.out_size = 0;
      return;
    }
    ChunkHeader h;
    h.tensor_index = job.tensor_index;
    h.kind = dense ? ChunkKind::kDense : ChunkKind::kSparse;
    h.value_codec = dense ? 0 : job.value_codec;
    h.compression = Compression::kNone;
    h.element_start = job.element_start;
    h.element_count = count;
    h.nnz = dense ? count : changed;
    h.raw_body_bytes = body;
    h.body_bytes = body;
    h.write(job.out);
    const uint64_t stored = h.stored_bytes();
    for (uint64_t k = ChunkHeader::kBytes + body; k < stored; ++k) job.out[k] = 0;
    *job.out_size = stored;
  });
  x.sync();
}

}  // namespace deltacast::simt
