// Sparse chunk bodies verified and applied group by group, one warp per
// group, so that a chunk's decode spreads over as many warps as it has
// groups of 128 changes. The groups of a body depend on each other only
// through where each starts (a byte offset) and the position its first gap
// counts from (the sum of the earlier groups' spans), so a version is
// decoded in passes:
//
//   walk   one thread per chunk hops over the block headers and records
//          each group's byte offset in a directory (GroupEntry);
//   check  one warp per group decodes it and checks what the CPU decoder
//          checks; it records the group's span (the sum of gap + 1);
//   place  one warp per chunk scans the spans into each group's first
//          position and checks the last change lies inside the chunk;
//   apply  one warp per group decodes it again and writes the changes.
//
// Or, where the device has room for it (KeptChanges), the check pass keeps
// what it decoded: each change's position within its group and its value, in
// a slot of its own. The apply pass is then one thread per change, reading
// its slot and writing the target, instead of a warp decoding every group a
// second time.
//
// The GPU launches apply only when walk, check and place flagged nothing,
// so a bad body writes nothing; the verify passes read only the compact
// bodies. Same checks as sparse/chunk_decoder.cc and the same writes; chunk
// headers and ranges are checked on the host before (read_version).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "sparse/cuda/pfor_warp.h"
#include "sparse/value_codec.h"

namespace deltacast::simt {

// What a decode pass found wrong; 0 is fine. Reported to the host with the job index.
enum DecodeError : uint32_t {
  kDecodeOk = 0,
  kDecodeBadIndexBlock = 1,
  kDecodeBadValueBlock = 2,
  kDecodeRawValuesTruncated = 3,
  kDecodePositionOutOfRange = 4,
  kDecodeUlpValueOutOfRange = 5,
  kDecodeBytesLeftOver = 6,
  kDecodeBadJob = 7,
};

inline const char* decode_error_name(uint32_t code) {
  switch (code) {
    case kDecodeOk:
      return "ok";
    case kDecodeBadIndexBlock:
      return "malformed index block";
    case kDecodeBadValueBlock:
      return "malformed ulp value block";
    case kDecodeRawValuesTruncated:
      return "raw values run past the chunk body";
    case kDecodePositionOutOfRange:
      return "change position beyond the chunk";
    case kDecodeUlpValueOutOfRange:
      return "ulp value does not fit the element";
    case kDecodeBytesLeftOver:
      return "bytes left over after the last group";
    default:
      return "inconsistent decode job";
  }
}

// One unit of decode work: a sparse chunk, or a piece of a dense chunk.
struct DecodeJob {
  const uint8_t* body;
  uint64_t body_bytes;
  uint8_t* target;  // the range's first element in the target tensor
  uint64_t element_count;
  uint64_t nnz;
  uint64_t first_group;  // sparse: where its groups start in the directory
  uint8_t elem_size;
  uint8_t dense;        // 1: copy body_bytes to target
  uint8_t value_codec;  // ValueCodec
  uint64_t kept_values;  // sparse, changes kept: where its groups' values start in KeptChanges::values
};

// Groups a sparse job's body holds (FORMAT.md: 128 changes each, the last one the rest).
DC_HOST_DEVICE inline uint64_t group_count(uint64_t nnz) { return (nnz + kPforBlockValues - 1) / kPforBlockValues; }

// One group of a sparse body, in the directory the walk pass fills.
struct GroupEntry {
  uint64_t at;     // byte offset of its index block in the body (walk)
  uint64_t span;   // positions it covers, the sum of its gaps + 1, saturated (check)
  uint64_t first;  // the position its first gap counts from (place)
  uint32_t job;
  uint32_t n;      // changes in the group
  uint32_t bytes;  // its index and value blocks' size (walk)
};

struct DecodeErrorRecord {
  uint32_t code;
  uint32_t job;
};

// The changes the check pass decoded, kept for the apply pass: change k of directory group g has
// slot g * 128 + k. offsets[slot] is its position after the group's first (a job of at most 2^32
// elements: a verified group spans no more than its chunk); its value, elem_size bytes, is at
// values + job.kept_values + ((g - job.first_group) * 128 + k) * elem_size.
struct KeptChanges {
  uint32_t* offsets = nullptr;
  uint8_t* values = nullptr;
};

// Whether a job's changes can be kept: their offsets fit 32 bits.
DC_HOST_DEVICE inline bool keepable(const DecodeJob& job) { return job.element_count <= (uint64_t{1} << 32); }

// Bytes of KeptChanges::values a sparse job's groups take (16-byte aligned, so that every job's
// values start aligned for their element).
DC_HOST_DEVICE inline uint64_t kept_value_bytes(uint64_t nnz, unsigned elem_size) {
  return (group_count(nnz) * kPforBlockValues * elem_size + 15) / 16 * 16;
}

// Where directory group g's kept values start (see KeptChanges).
DC_HOST_DEVICE inline uint8_t* kept_values_of(const KeptChanges& kept, const DecodeJob& job, uint64_t g) {
  return kept.values + job.kept_values + (g - job.first_group) * kPforBlockValues * job.elem_size;
}

// f(U{}) for U the unsigned type of `size` bytes (1, 2, 4 or 8), or kDecodeBadJob for any other
// size: one dispatch for every pass that handles an element as its type.
template <typename F>
DC_HOST_DEVICE uint32_t with_element_type(unsigned size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return kDecodeBadJob;
  }
}

// A group of at most this many bytes is copied into shared memory before it is decoded (about 180
// bytes for 128 bf16 changes at 1%; at most 2.3 KB for any, which would cost occupancy to hold):
// one round trip to memory for its bytes instead of one for each step of its decode (header,
// values, exceptions, then again for the value block), each waiting on the one before.
inline constexpr unsigned kStagedGroupBytes = 768;

// Shared memory one warp needs to decode one group.
struct GroupScratch {
  uint8_t staged[kStagedGroupBytes];
  uint64_t gaps[kPforBlockValues];
  uint64_t values[kPforBlockValues];
  uint64_t lane_sum[kWarpSize];
  PforDecodeScratch pfor;
  uint32_t error;
};

// Little-endian value of `size` bytes at an unaligned address.
DC_HOST_DEVICE inline uint64_t load_bytes(const uint8_t* p, unsigned size) {
  uint64_t v = 0;
  for (unsigned i = 0; i < size; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

DC_HOST_DEVICE inline bool is_ulp(const DecodeJob& job) {
  return job.value_codec == static_cast<uint8_t>(ValueCodec::kUlp);
}

// Walk pass, one thread per sparse job (on the GPU lane 0 of a warp whose lanes
// first prefetch the body): hops over the groups' block headers,
// fills the job's directory entries (from job.first_group) and checks that
// the groups use the body exactly. Returns a DecodeError.
DC_HOST_DEVICE inline uint32_t walk_groups(const DecodeJob& job, uint32_t job_index, GroupEntry* directory) {
  if (job.dense || job.nnz == 0 || job.nnz > job.element_count) return kDecodeBadJob;
  const bool ulp = is_ulp(job);
  GroupEntry* entry = directory + job.first_group;
  uint64_t at = 0;
  for (uint64_t done = 0; done < job.nnz; done += kPforBlockValues, ++entry) {
    const unsigned n = job.nnz - done < kPforBlockValues ? static_cast<unsigned>(job.nnz - done) : kPforBlockValues;
    const uint64_t start = at;
    *entry = GroupEntry{start, 0, 0, job_index, n, 0};
    const size_t index_bytes = pfor_parse_header(job.body + at, job.body_bytes - at, n).bytes;
    if (index_bytes == 0) return kDecodeBadIndexBlock;
    at += index_bytes;
    if (ulp) {
      const size_t value_bytes = pfor_parse_header(job.body + at, job.body_bytes - at, n).bytes;
      if (value_bytes == 0) return kDecodeBadValueBlock;
      at += value_bytes;
    } else {
      const uint64_t raw_bytes = static_cast<uint64_t>(n) * job.elem_size;
      if (job.body_bytes - at < raw_bytes) return kDecodeRawValuesTruncated;
      at += raw_bytes;
    }
    // At most two blocks of 128 values (or 128 raw elements of 8 bytes): it fits 32 bits.
    entry->bytes = static_cast<uint32_t>(at - start);
  }
  return at == job.body_bytes ? kDecodeOk : kDecodeBytesLeftOver;
}

// Copies in[0, n) (n <= kStagedGroupBytes) to `staged`, coalesced: each lane issues all of its loads
// before its first store, as warp_read_then_store does and for the same reason (a store to shared
// memory between two loads would make each load wait for the byte before it: the compiler cannot
// tell that `in` is not shared memory). Ends with a sync.
template <typename Warp>
DC_HOST_DEVICE void warp_stage_bytes(const Warp& x, const uint8_t* in, unsigned n, uint8_t* staged) {
  // Four loads in flight per lane and batch: 128 bytes a batch, two for a group of 128 bf16 changes
  // at 1% (about 180 bytes), six at most. (ptxas, sm_90: eight took check_groups from 40 to 48
  // registers, 12 to 10 blocks per SM; all 24 at once to 56.)
  constexpr unsigned kBatch = 4;
  x.lanes([&](unsigned lane) {
    for (unsigned base = lane; base < n; base += kBatch * kWarpSize) {
      uint8_t v[kBatch];
DC_UNROLL
      for (unsigned r = 0; r < kBatch; ++r) {
        const unsigned k = base + r * kWarpSize;
        v[r] = k < n ? in[k] : 0;
      }
DC_UNROLL
      for (unsigned r = 0; r < kBatch; ++r) {
        const unsigned k = base + r * kWarpSize;
        if (k < n) staged[k] = v[r];
      }
    }
  });
  x.sync();
}

// Decodes group `e` of `job` into s.gaps and s.values (every check of its
// blocks included); returns a DecodeError.
//
// A group of at most kStagedGroupBytes is decoded from a copy in s.staged. Its blocks are then
// checked against the group's bytes rather than the rest of the body: the walk measured those
// bytes from the same headers, so every verdict is the same.
template <typename Warp>
DC_HOST_DEVICE uint32_t warp_decode_group(const Warp& x, const DecodeJob& job, const GroupEntry& e, GroupScratch& s) {
  const uint8_t* in = job.body + e.at;
  uint64_t avail = job.body_bytes - e.at;
  if (e.bytes <= kStagedGroupBytes) {
    x.sync();  // every lane is done with the group before (a warp decodes groups back to back)
    warp_stage_bytes(x, in, e.bytes, s.staged);
    in = s.staged;
    avail = e.bytes;
  }
  const size_t index_bytes = warp_pfor_decode(x, in, avail, e.n, s.gaps, s.pfor);
  if (index_bytes == 0) return kDecodeBadIndexBlock;
  if (is_ulp(job)) {
    if (warp_pfor_decode(x, in + index_bytes, avail - index_bytes, e.n, s.values, s.pfor) == 0) {
      return kDecodeBadValueBlock;
    }
    return kDecodeOk;
  }
  if (avail - index_bytes < static_cast<uint64_t>(e.n) * job.elem_size) return kDecodeRawValuesTruncated;
  const uint8_t* raw = in + index_bytes;
  warp_read_then_store(x, e.n, s.values,
                       [&](unsigned k) { return load_bytes(raw + k * job.elem_size, job.elem_size); });
  return kDecodeOk;
}

// Check pass, one warp per group: decodes it, checks its ulp values fit the
// element, and records its span (entry.span): lane l sums changes [4l, 4l + 4),
// a warp scan adds the lanes up. Keeps the changes in `kept` (as directory group
// g) unless kept.offsets is null. Returns a DecodeError.
template <typename Warp>
DC_HOST_DEVICE void warp_keep_group(const Warp& x, const DecodeJob& job, const GroupEntry& e, const GroupScratch& s,
                                    uint64_t g, const KeptChanges& kept);

template <typename Warp>
DC_HOST_DEVICE uint32_t warp_check_group(const Warp& x, const DecodeJob& job, GroupEntry& e, GroupScratch& s,
                                         uint64_t g = 0, KeptChanges kept = {}) {
  const uint32_t code = warp_decode_group(x, job, e, s);
  if (code != kDecodeOk) return code;
  const bool ulp = is_ulp(job);
  const uint64_t ulp_max = ulp_max_stored(8u * job.elem_size);
  x.lanes([&](unsigned lane) {
    if (lane == 0) s.error = kDecodeOk;
    uint64_t sum = 0;
    for (unsigned k = 4 * lane; k < 4 * lane + 4 && k < e.n; ++k)
      sum = add_saturating(sum, add_saturating(s.gaps[k], 1));
    s.lane_sum[lane] = sum;
  });
  x.sync();
  x.lanes([&](unsigned lane) {
    if (!ulp) return;
    for (unsigned k = lane; k < e.n; k += kWarpSize) {
      if (s.values[k] > ulp_max) s.error = kDecodeUlpValueOutOfRange;  // every writer stores the same value
    }
  });
  const uint64_t span = x.exclusive_scan(s.lane_sum);
  x.sync();
  if (s.error != kDecodeOk) return s.error;
  // A group that alone covers more than the chunk is out of range wherever it starts.
  if (span > job.element_count) return kDecodePositionOutOfRange;
  x.lanes([&](unsigned lane) {
    if (lane == 0) e.span = span;
  });
  x.sync();
  if (kept.offsets != nullptr) warp_keep_group(x, job, e, s, g, kept);
  return kDecodeOk;
}

// Check pass, changes kept: writes directory group g's decoded changes (s, after its check) to their
// slots. The scan left in s.lane_sum where each lane's first change counts from; the group's span
// fits the job (checked), so neither the sums nor the offsets wrap.
template <typename Warp>
DC_HOST_DEVICE void warp_keep_group(const Warp& x, const DecodeJob& job, const GroupEntry& e, const GroupScratch& s,
                                    uint64_t g, const KeptChanges& kept) {
  uint32_t* offsets = kept.offsets + g * kPforBlockValues;
  uint8_t* values = kept_values_of(kept, job, g);
  x.lanes([&](unsigned lane) {
    uint64_t next = s.lane_sum[lane];
    for (unsigned k = 4 * lane; k < 4 * lane + 4 && k < e.n; ++k) {
      offsets[k] = static_cast<uint32_t>(next + s.gaps[k]);
      next += s.gaps[k] + 1;
    }
    // (An element of no such size stores nothing; the apply pass refuses its job.)
    with_element_type(job.elem_size, [&](auto type) {
      using U = decltype(type);
      for (unsigned k = lane; k < e.n; k += kWarpSize) reinterpret_cast<U*>(values)[k] = static_cast<U>(s.values[k]);
      return kDecodeOk;
    });
  });
  x.sync();
}

// Place pass, one warp per sparse job: each group's first position is the
// sum of the spans before it; all of them must end inside the chunk.
template <typename Warp>
DC_HOST_DEVICE uint32_t warp_place_groups(const Warp& x, const DecodeJob& job, GroupEntry* directory, GroupScratch& s) {
  GroupEntry* entries = directory + job.first_group;
  const uint64_t groups = group_count(job.nnz);
  uint64_t carry = 0;  // every lane holds the same value
  for (uint64_t g0 = 0; g0 < groups; g0 += kWarpSize) {
    x.lanes([&](unsigned lane) { s.lane_sum[lane] = g0 + lane < groups ? entries[g0 + lane].span : 0; });
    x.sync();
    const uint64_t total = x.exclusive_scan(s.lane_sum);
    x.sync();
    x.lanes([&](unsigned lane) {
      if (g0 + lane < groups) entries[g0 + lane].first = add_saturating(carry, s.lane_sum[lane]);
    });
    x.sync();
    carry = add_saturating(carry, total);
  }
  return carry <= job.element_count ? kDecodeOk : kDecodePositionOutOfRange;
}

// Apply pass, one warp per group of a version that verified: writes its
// changes into the target.
template <typename U, typename Warp>
DC_HOST_DEVICE uint32_t warp_apply_group_as(const Warp& x, const DecodeJob& job, const GroupEntry& e, GroupScratch& s) {
  constexpr unsigned kBits = sizeof(U) * 8;
  const uint32_t code = warp_decode_group(x, job, e, s);
  if (code != kDecodeOk) return code;
  x.lanes([&](unsigned lane) {
    uint64_t sum = 0;
    for (unsigned k = 4 * lane; k < 4 * lane + 4 && k < e.n; ++k) sum += s.gaps[k] + 1;
    s.lane_sum[lane] = sum;
  });
  x.sync();
  x.exclusive_scan(s.lane_sum);
  x.sync();
  const bool ulp = is_ulp(job);
  U* out = reinterpret_cast<U*>(job.target);
  x.lanes([&](unsigned lane) {
    // A lane's four elements are read before any is written: the positions rise, so they are
    // distinct, but the compiler cannot know it, and a store before the next read would make each
    // read wait for the previous one (four trips to memory per lane instead of one).
    constexpr unsigned kPerLane = kPforBlockValues / kWarpSize;
    static_assert(kPerLane == 4, "lane l applies changes [4l, 4l + 4): lane_sum is summed that way");
    uint64_t next = e.first + s.lane_sum[lane];
    U* at[kPerLane];
    U old[kPerLane];
DC_UNROLL
    for (unsigned r = 0; r < kPerLane; ++r) {
      const unsigned k = 4 * lane + r;
      at[r] = k < e.n ? out + next + s.gaps[k] : nullptr;
      if (k < e.n) next += s.gaps[k] + 1;
    }
DC_UNROLL
    for (unsigned r = 0; r < kPerLane; ++r) old[r] = ulp && at[r] ? *at[r] : U{};
DC_UNROLL
    for (unsigned r = 0; r < kPerLane; ++r) {
      const unsigned k = 4 * lane + r;
      if (at[r]) *at[r] = static_cast<U>(ulp ? ulp_decode(old[r], s.values[k], kBits) : s.values[k]);
    }
  });
  x.sync();
  return kDecodeOk;
}

template <typename Warp>
DC_HOST_DEVICE uint32_t warp_apply_group(const Warp& x, const DecodeJob& job, const GroupEntry& e, GroupScratch& s) {
  return with_element_type(job.elem_size,
                           [&](auto type) { return warp_apply_group_as<decltype(type)>(x, job, e, s); });
}

// Apply pass, changes kept, one thread per slot (a version that verified): writes the slot's change,
// if the slot holds one (a job's last group may hold fewer than 128).
template <typename U>
DC_HOST_DEVICE void apply_kept_change_as(const DecodeJob& job, uint64_t position, const uint8_t* value_at) {
  constexpr unsigned kBits = sizeof(U) * 8;
  U* at = reinterpret_cast<U*>(job.target) + position;
  const U value = *reinterpret_cast<const U*>(value_at);
  *at = is_ulp(job) ? static_cast<U>(ulp_decode(*at, value, kBits)) : value;
}

DC_HOST_DEVICE inline uint32_t apply_kept_change(const DecodeJob* jobs, const GroupEntry* directory,
                                                 const KeptChanges& kept, uint64_t slot) {
  const uint64_t g = slot / kPforBlockValues;
  const unsigned k = static_cast<unsigned>(slot % kPforBlockValues);
  const GroupEntry& e = directory[g];
  if (k >= e.n) return kDecodeOk;
  const DecodeJob& job = jobs[e.job];
  const uint64_t position = e.first + kept.offsets[slot];
  const uint8_t* value_at = kept_values_of(kept, job, g) + k * job.elem_size;
  return with_element_type(job.elem_size, [&](auto type) {
    apply_kept_change_as<decltype(type)>(job, position, value_at);
    return kDecodeOk;
  });
}

// A 16-byte unit for copies: 16-byte loads and stores where both ends allow.
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

// Dense piece (apply pass): the body is the elements' bytes.
template <typename Warp>
DC_HOST_DEVICE uint32_t warp_copy_piece(const Warp& x, const DecodeJob& job) {
  if (!job.dense || job.body_bytes != job.element_count * job.elem_size) return kDecodeBadJob;
  uint8_t* dst = job.target;
  const uint8_t* src = job.body;
  const uint64_t bytes = job.body_bytes;
  const bool wide = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) % 16 == 0;
  x.lanes([&](unsigned lane) {
    if (wide) {
      for (uint64_t k = lane; k < bytes / 16; k += kWarpSize) {
        reinterpret_cast<Bytes16*>(dst)[k] = reinterpret_cast<const Bytes16*>(src)[k];
      }
    } else {
      for (uint64_t k = lane; k < bytes; k += kWarpSize) dst[k] = src[k];
    }
  });
  x.sync();
  return kDecodeOk;
}

}  // namespace deltacast::simt
