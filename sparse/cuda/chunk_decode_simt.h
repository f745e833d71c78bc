// Sparse chunk bodies decoded by one warp, group by group: the same checks
// as the CPU decoder (sparse/chunk_decoder.cc) and, in apply mode, the same
// writes. The GPU runs a verify pass over every chunk of a version first and
// the apply pass only when nothing was flagged, so a bad body writes nothing.
// Chunk headers and ranges are checked on the host before (read_version).
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
    case kDecodeOk: return "ok";
    case kDecodeBadIndexBlock: return "malformed index block";
    case kDecodeBadValueBlock: return "malformed ulp value block";
    case kDecodeRawValuesTruncated: return "raw values run past the chunk body";
    case kDecodePositionOutOfRange: return "change position beyond the chunk";
    case kDecodeUlpValueOutOfRange: return "ulp value does not fit the element";
    case kDecodeBytesLeftOver: return "bytes left over after the last group";
    default: return "inconsistent decode job";
  }
}

// One unit of decode work: a sparse chunk, or a piece of a dense chunk.
struct DecodeJob {
  const uint8_t* body;
  uint64_t body_bytes;
  uint8_t* target;  // the range's first element in the target tensor
  uint64_t element_count;
  uint64_t nnz;
  uint8_t elem_size;
  uint8_t dense;        // 1: copy body_bytes to target
  uint8_t value_codec;  // ValueCodec
};

struct DecodeErrorRecord {
  uint32_t code;
  uint32_t job;
};

struct DecodeWarpScratch {
  uint64_t gaps[kPforBlockValues];
  uint64_t values[kPforBlockValues];
  uint64_t positions[kPforBlockValues];
  PforWarpScratch pfor;
  uint64_t next;  // smallest position the next change may have
  uint32_t error;
};

// Little-endian value of `size` bytes at an unaligned address.
DC_HOST_DEVICE inline uint64_t load_bytes(const uint8_t* p, unsigned size) {
  uint64_t v = 0;
  for (unsigned i = 0; i < size; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Verifies (kApply = false) or applies a sparse chunk; returns a DecodeError.
template <typename U, bool kApply, typename Warp>
DC_HOST_DEVICE uint32_t warp_decode_sparse(const Warp& x, const DecodeJob& job, DecodeWarpScratch& s) {
  constexpr unsigned kBits = sizeof(U) * 8;
  const bool ulp = job.value_codec == static_cast<uint8_t>(ValueCodec::kUlp);
  if (job.nnz > job.element_count) return kDecodeBadJob;
  x.lanes([&](unsigned lane) {
    if (lane == 0) {
      s.next = 0;
      s.error = kDecodeOk;
    }
  });
  x.sync();
  uint64_t at = 0;  // byte offset in the body; every lane computes the same value
  for (uint64_t done = 0; done < job.nnz; done += kPforBlockValues) {
    const unsigned n = job.nnz - done < kPforBlockValues ? static_cast<unsigned>(job.nnz - done) : kPforBlockValues;
    const size_t index_bytes = warp_pfor_decode(x, job.body + at, job.body_bytes - at, n, s.gaps, s.pfor);
    if (index_bytes == 0) return kDecodeBadIndexBlock;
    at += index_bytes;
    if (ulp) {
      const size_t value_bytes = warp_pfor_decode(x, job.body + at, job.body_bytes - at, n, s.values, s.pfor);
      if (value_bytes == 0) return kDecodeBadValueBlock;
      at += value_bytes;
    } else {
      if (job.body_bytes - at < static_cast<uint64_t>(n) * sizeof(U)) return kDecodeRawValuesTruncated;
      x.lanes([&](unsigned lane) {
        for (unsigned k = lane; k < n; k += kWarpSize) s.values[k] = load_bytes(job.body + at + k * sizeof(U), sizeof(U));
      });
      at += static_cast<uint64_t>(n) * sizeof(U);
    }
    // Positions: a running sum, by one lane (cheap next to the memory traffic of the writes).
    x.lanes([&](unsigned lane) {
      if (lane == 0) {
        uint64_t next = s.next;
        for (unsigned k = 0; k < n; ++k) {
          if (s.gaps[k] >= job.element_count - next) {  // next <= element_count always holds
            s.error = kDecodePositionOutOfRange;
            break;
          }
          s.positions[k] = next + s.gaps[k];
          next = s.positions[k] + 1;
        }
        s.next = next;
      }
      if (ulp) {
        for (unsigned k = lane; k < n; k += kWarpSize) {
          if (s.values[k] > ulp_max_stored(kBits)) s.error = kDecodeUlpValueOutOfRange;
        }
      }
    });
    x.sync();
    if (s.error != kDecodeOk) return s.error;
    if constexpr (kApply) {
      U* out = reinterpret_cast<U*>(job.target);
      x.lanes([&](unsigned lane) {
        for (unsigned k = lane; k < n; k += kWarpSize) {
          U* p = out + s.positions[k];
          *p = static_cast<U>(ulp ? ulp_decode(*p, s.values[k], kBits) : s.values[k]);
        }
      });
      x.sync();
    }
  }
  return at == job.body_bytes ? kDecodeOk : kDecodeBytesLeftOver;
}

// Dense piece: the body is the elements' bytes.
template <typename Warp>
DC_HOST_DEVICE void warp_copy(const Warp& x, uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  x.lanes([&](unsigned lane) {
    for (uint64_t k = lane; k < bytes; k += kWarpSize) dst[k] = src[k];
  });
  x.sync();
}

// One job of a verify or apply pass; returns a DecodeError.
template <bool kApply, typename Warp>
DC_HOST_DEVICE uint32_t warp_decode_job(const Warp& x, const DecodeJob& job, DecodeWarpScratch& s) {
  if (job.dense) {
    if (job.body_bytes != job.element_count * job.elem_size) return kDecodeBadJob;
    if constexpr (kApply) warp_copy(x, job.target, job.body, job.body_bytes);
    return kDecodeOk;
  }
  switch (job.elem_size) {
    case 1: return warp_decode_sparse<uint8_t, kApply>(x, job, s);
    case 2: return warp_decode_sparse<uint16_t, kApply>(x, job, s);
    case 4: return warp_decode_sparse<uint32_t, kApply>(x, job, s);
    case 8: return warp_decode_sparse<uint64_t, kApply>(x, job, s);
    default: return kDecodeBadJob;
  }
}

}  // namespace deltacast::simt
