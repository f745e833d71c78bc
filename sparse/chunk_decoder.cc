#include "sparse/chunk_decoder.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/byte_io.h"
#include "sparse/pfor.h"
#include "sparse/value_codec.h"

namespace deltacast {

Status check_chunk_header(const ChunkHeader& h, const Manifest& manifest) {
  if (h.tensor_index >= manifest.size()) {
    return corrupt("chunk names tensor {}, the manifest has {}", h.tensor_index, manifest.size());
  }
  const TensorSpec& t = manifest[h.tensor_index];
  const uint64_t numel = t.numel();
  const uint64_t elem_size = dtype_size(t.dtype);
  if (h.element_count == 0) return corrupt("chunk of tensor '{}' covers no elements", t.name);
  if (h.element_start > numel || h.element_count > numel - h.element_start) {
    return corrupt("chunk range [{}, +{}) lies outside tensor '{}' of {} elements", h.element_start, h.element_count,
                   t.name, numel);
  }
  const uint64_t dense_bytes = h.element_count * elem_size;
  if (h.kind == ChunkKind::kDense) {
    if (h.value_codec != 0 || h.nnz != h.element_count || h.raw_body_bytes != dense_bytes) {
      return corrupt("dense chunk of tensor '{}' has inconsistent sizes (nnz {}, body {} for {} bytes)", t.name, h.nnz,
                     h.raw_body_bytes, dense_bytes);
    }
  } else {
    if (h.nnz == 0 || h.nnz > h.element_count) {
      return corrupt("sparse chunk of tensor '{}' claims {} changes in {} elements", t.name, h.nnz, h.element_count);
    }
    if (static_cast<ValueCodec>(h.value_codec) == ValueCodec::kUlp && !dtype_is_floating(t.dtype)) {
      return corrupt("ulp values for tensor '{}' of non-float dtype {}", t.name, dtype_name(t.dtype));
    }
    if (h.raw_body_bytes > dense_bytes) {
      return corrupt("sparse chunk of tensor '{}' has a {}-byte body for a {}-byte range", t.name, h.raw_body_bytes,
                     dense_bytes);
    }
    // Each group holds at least a 2-byte index block, and raw values take their full width.
    const uint64_t groups = (h.nnz + kPforBlockValues - 1) / kPforBlockValues;
    const uint64_t raw_values = static_cast<ValueCodec>(h.value_codec) == ValueCodec::kRaw ? h.nnz * elem_size : 0;
    if (h.raw_body_bytes < 2 * groups + raw_values) {
      return corrupt("sparse chunk of tensor '{}' has a {}-byte body, too small for {} changes", t.name,
                     h.raw_body_bytes, h.nnz);
    }
  }
  // The stored body lies inside the bucket, which bounds it; only its relation to the raw body is checked.
  if (h.compression == Compression::kNone ? h.body_bytes != h.raw_body_bytes : h.body_bytes == 0) {
    return corrupt("chunk of tensor '{}' stores {} bytes for a {}-byte body", t.name, h.body_bytes, h.raw_body_bytes);
  }
  return Status();
}

namespace {

// Reads a sparse body one group (up to 128 changes) at a time: the gaps and
// stored values of each group, with the structural checks every consumer
// needs (PFOR validity, raw values present, no bytes left over). Position
// and value ranges are checked by the callers, each in the form that suits it.
class SparseBlocks {
 public:
  static Result<SparseBlocks> open(const ChunkHeader& h, std::span<const uint8_t> body, unsigned elem_size) {
    if (body.size() != h.raw_body_bytes || h.nnz > h.element_count) {
      return corrupt("sparse body of {} bytes does not match its header", body.size());
    }
    return SparseBlocks(h, body, elem_size);
  }

  // Fills up to 128 gaps and stored values; *n = 0 at the end.
  Status next(uint64_t* gaps, uint64_t* values, size_t* n) {
    *n = 0;
    if (left_ == 0) return Status();
    const size_t count = std::min<uint64_t>(left_, kPforBlockValues);
    size_t used = 0;
    DC_RETURN_IF_ERROR(pfor_decode_block(body_.subspan(pos_), count, gaps, &used).with_context("index block"));
    pos_ += used;
    if (ulp_) {
      DC_RETURN_IF_ERROR(pfor_decode_block(body_.subspan(pos_), count, values, &used).with_context("ulp value block"));
      pos_ += used;
    } else {
      if (body_.size() - pos_ < count * elem_size_) return corrupt("raw values run past the chunk body");
      // One loop per width: a memcpy of a run-time size is a call per value.
      const uint8_t* p = body_.data() + pos_;
      switch (elem_size_) {
        case 1: widen<uint8_t>(p, count, values); break;
        case 2: widen<uint16_t>(p, count, values); break;
        case 4: widen<uint32_t>(p, count, values); break;
        default: widen<uint64_t>(p, count, values); break;
      }
      pos_ += count * elem_size_;
    }
    left_ -= count;
    *n = count;
    return Status();
  }

  // After the last group: every byte of the body was used.
  Status finish() const {
    if (pos_ != body_.size()) return corrupt("sparse body has {} bytes left over", body_.size() - pos_);
    return Status();
  }

  bool ulp() const { return ulp_; }

 private:
  template <typename U>
  static void widen(const uint8_t* p, size_t n, uint64_t* values) {
    for (size_t k = 0; k < n; ++k) values[k] = load_le<U>(p + k * sizeof(U));
  }

  SparseBlocks(const ChunkHeader& h, std::span<const uint8_t> body, unsigned elem_size)
      : body_(body),
        left_(h.nnz),
        elem_size_(elem_size),
        ulp_(static_cast<ValueCodec>(h.value_codec) == ValueCodec::kUlp) {}

  std::span<const uint8_t> body_;
  size_t pos_ = 0;
  uint64_t left_;
  unsigned elem_size_;
  bool ulp_;
};

// values[0, n) summed, or the largest uint64_t when the sum does not fit.
uint64_t sum_saturating(const uint64_t* values, size_t n) {
  uint64_t sum = 0;
  for (size_t k = 0; k < n; ++k) {
    if (__builtin_add_overflow(sum, values[k], &sum)) return ~uint64_t{0};
  }
  return sum;
}

// Verification needs no positions, only that they stay inside the chunk: the
// last position is the sum of the gaps plus one per change before it, so a
// sum and a maximum per block (both vectorise) replace the prefix sum.
Status verify_sparse(const ChunkHeader& h, std::span<const uint8_t> body, unsigned elem_size) {
  DC_ASSIGN_OR_RETURN(SparseBlocks blocks, SparseBlocks::open(h, body, elem_size));
  const uint64_t max_stored = ulp_max_stored(elem_size * 8);
  uint64_t gaps[kPforBlockValues];
  uint64_t values[kPforBlockValues];
  uint64_t end = 0;  // position after the last change so far; stays <= element_count
  for (;;) {
    size_t n = 0;
    DC_RETURN_IF_ERROR(blocks.next(gaps, values, &n));
    if (n == 0) break;
    uint64_t largest_gap = 0, gap_sum = 0, largest_value = 0;
    for (size_t k = 0; k < n; ++k) {
      largest_gap = std::max(largest_gap, gaps[k]);
      gap_sum += gaps[k];
      largest_value = std::max(largest_value, values[k]);
    }
    // The sum wraps around only if some gap is not below the chunk's size (rejected below anyway)
    // or that size is above 2^57 (128 gaps): then it is summed again, saturating.
    if (largest_gap < h.element_count && h.element_count > (uint64_t{1} << 57)) gap_sum = sum_saturating(gaps, n);
    const uint64_t room = h.element_count - end;  // positions left after the changes so far
    if (largest_gap >= h.element_count || n > room || gap_sum > room - n) {
      return corrupt("change position beyond the chunk's {} elements", h.element_count);
    }
    end += gap_sum + n;
    if (blocks.ulp() && largest_value > max_stored) {
      return corrupt("ulp value {} does not fit a {}-bit element", largest_value, elem_size * 8);
    }
  }
  return blocks.finish();
}

// Changes are ~100 elements apart, so nearly every write misses the cache.
// Positions are decoded a segment ahead of the writes and prefetched a fixed
// distance ahead, so many misses are in flight instead of one at a time.
constexpr size_t kSegmentBlocks = 32;
constexpr size_t kPrefetchAhead = 16;

// A segment's decoded positions and values, per thread and on the heap: as thread_local arrays
// (a pair per element type) they made 256 KB of static TLS in every thread of the process, and a
// thread that another library starts with a small stack (civetweb's 100 KB, serving metrics)
// could not start at all.
struct SegmentBuffers {
  std::unique_ptr<uint64_t[]> positions = std::make_unique_for_overwrite<uint64_t[]>(kSegmentBlocks * kPforBlockValues);
  std::unique_ptr<uint64_t[]> values = std::make_unique_for_overwrite<uint64_t[]>(kSegmentBlocks * kPforBlockValues);
};

SegmentBuffers& segment_buffers() {
  thread_local SegmentBuffers buffers;
  return buffers;
}

template <typename U>
Status apply_sparse(const ChunkHeader& h, std::span<const uint8_t> body, uint8_t* range_start) {
  DC_ASSIGN_OR_RETURN(SparseBlocks blocks, SparseBlocks::open(h, body, sizeof(U)));
  U* out = reinterpret_cast<U*>(range_start);
  constexpr unsigned kBits = sizeof(U) * 8;
  SegmentBuffers& segment = segment_buffers();
  uint64_t* const positions = segment.positions.get();
  uint64_t* const values = segment.values.get();
  uint64_t next = 0;  // smallest position the next change may have
  for (;;) {
    // Decode a segment of blocks into positions, checking each stays inside the chunk.
    size_t filled = 0;
    while (filled + kPforBlockValues <= kSegmentBlocks * kPforBlockValues) {
      size_t n = 0;
      DC_RETURN_IF_ERROR(blocks.next(positions + filled, values + filled, &n));
      if (n == 0) break;
      for (size_t k = filled; k < filled + n; ++k) {
        if (positions[k] >= h.element_count - next)
          return corrupt("change position beyond the chunk's {} elements", h.element_count);
        positions[k] += next;
        next = positions[k] + 1;
      }
      filled += n;
    }
    if (filled == 0) break;
    for (size_t k = 0; k < std::min(filled, kPrefetchAhead); ++k) __builtin_prefetch(out + positions[k], 1);
    for (size_t k = 0; k < filled; ++k) {
      if (k + kPrefetchAhead < filled) __builtin_prefetch(out + positions[k + kPrefetchAhead], 1);
      U* p = out + positions[k];
      if (blocks.ulp()) {
        if (values[k] > ulp_max_stored(kBits)) return corrupt("ulp value does not fit a {}-bit element", kBits);
        *p = static_cast<U>(ulp_decode(*p, values[k], kBits));
      } else {
        *p = static_cast<U>(values[k]);
      }
    }
  }
  return blocks.finish();
}

}  // namespace

Status verify_chunk_body(const ChunkHeader& h, std::span<const uint8_t> raw_body, DType dtype) {
  if (raw_body.size() != h.raw_body_bytes)
    return corrupt("chunk body is {} bytes, header says {}", raw_body.size(), h.raw_body_bytes);
  if (h.kind == ChunkKind::kDense) return Status();  // any bytes are valid elements
  return verify_sparse(h, raw_body, dtype_size(dtype));
}

Status apply_chunk_body(const ChunkHeader& h, std::span<const uint8_t> raw_body, const TensorView& target) {
  const unsigned elem_size = dtype_size(target.dtype);
  if (h.element_start > target.numel || h.element_count > target.numel - h.element_start) {
    return corrupt("chunk range [{}, +{}) lies outside a tensor of {} elements", h.element_start, h.element_count,
                   target.numel);
  }
  uint8_t* range_start = target.bytes() + h.element_start * elem_size;
  if (h.kind == ChunkKind::kDense) {
    if (raw_body.size() != h.element_count * elem_size) return corrupt("dense chunk body size mismatch");
    std::memcpy(range_start, raw_body.data(), raw_body.size());
    return Status();
  }
  switch (elem_size) {
    case 1:
      return apply_sparse<uint8_t>(h, raw_body, range_start);
    case 2:
      return apply_sparse<uint16_t>(h, raw_body, range_start);
    case 4:
      return apply_sparse<uint32_t>(h, raw_body, range_start);
    case 8:
      return apply_sparse<uint64_t>(h, raw_body, range_start);
    default:
      return internal_error("element size {} unsupported", elem_size);
  }
}

}  // namespace deltacast
