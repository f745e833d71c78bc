#include "sparse/chunk_decoder.h"

#include <cstring>

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
    if (h.value_codec != 0 || h.index_bytes != 0 || h.nnz != h.element_count || h.raw_body_bytes != dense_bytes) {
      return corrupt("dense chunk of tensor '{}' has inconsistent sizes (nnz {}, index {}, body {} for {} bytes)", t.name,
                     h.nnz, h.index_bytes, h.raw_body_bytes, dense_bytes);
    }
  } else {
    if (h.nnz == 0 || h.nnz > h.element_count) {
      return corrupt("sparse chunk of tensor '{}' claims {} changes in {} elements", t.name, h.nnz, h.element_count);
    }
    if (static_cast<ValueCodec>(h.value_codec) == ValueCodec::kUlp && !dtype_is_floating(t.dtype)) {
      return corrupt("ulp values for tensor '{}' of non-float dtype {}", t.name, dtype_name(t.dtype));
    }
    if (h.raw_body_bytes > dense_bytes || h.index_bytes > h.raw_body_bytes) {
      return corrupt("sparse chunk of tensor '{}' has body {} / index {} bytes for a {}-byte range", t.name,
                     h.raw_body_bytes, h.index_bytes, dense_bytes);
    }
    if (static_cast<ValueCodec>(h.value_codec) == ValueCodec::kRaw &&
        h.raw_body_bytes - h.index_bytes != h.nnz * elem_size) {
      return corrupt("raw values of tensor '{}' take {} bytes, {} changes need {}", t.name,
                     h.raw_body_bytes - h.index_bytes, h.nnz, h.nnz * elem_size);
    }
  }
  // The stored body lies inside the bucket, which bounds it; only its relation to the raw body is checked.
  if (h.compression == Compression::kNone ? h.body_bytes != h.raw_body_bytes : h.body_bytes == 0) {
    return corrupt("chunk of tensor '{}' stores {} bytes for a {}-byte body", t.name, h.body_bytes, h.raw_body_bytes);
  }
  return Status();
}

namespace {

// Walks a sparse body block by block, checking every position and value, and
// hands each block of (position, stored value) pairs to `sink`.
template <typename Sink>
Status walk_sparse(const ChunkHeader& h, std::span<const uint8_t> body, unsigned elem_size, Sink&& sink) {
  const bool ulp = static_cast<ValueCodec>(h.value_codec) == ValueCodec::kUlp;
  // Repeats the size checks of check_chunk_header so that the walker is safe on its own.
  if (body.size() != h.raw_body_bytes || h.index_bytes > body.size() || h.nnz > h.element_count ||
      (!ulp && body.size() - h.index_bytes != h.nnz * elem_size)) {
    return corrupt("sparse body of {} bytes does not match its header", body.size());
  }
  const unsigned bits = elem_size * 8;
  const uint64_t max_stored = ulp_max_stored(bits);
  PforReader index(body.first(h.index_bytes), h.nnz);
  const std::span<const uint8_t> value_section = body.subspan(h.index_bytes);
  PforReader ulp_values(value_section, h.nnz);
  size_t raw_offset = 0;
  uint64_t positions[kPforBlockValues];
  uint64_t values[kPforBlockValues];
  uint64_t next = 0;  // smallest position the next change may have
  for (;;) {
    size_t n = 0;
    DC_RETURN_IF_ERROR(index.next(positions, &n).with_context("index section"));
    if (n == 0) break;
    for (size_t k = 0; k < n; ++k) {
      if (positions[k] >= h.element_count - next) {  // next <= element_count always holds here
        return corrupt("change position beyond the chunk's {} elements", h.element_count);
      }
      positions[k] += next;
      next = positions[k] + 1;
    }
    if (ulp) {
      size_t m = 0;
      DC_RETURN_IF_ERROR(ulp_values.next(values, &m).with_context("ulp value section"));
      for (size_t k = 0; k < n; ++k) {
        if (values[k] > max_stored) return corrupt("ulp value {} does not fit a {}-bit element", values[k], bits);
      }
    } else {
      for (size_t k = 0; k < n; ++k, raw_offset += elem_size) {
        uint64_t v = 0;
        std::memcpy(&v, value_section.data() + raw_offset, elem_size);  // size checked above
        values[k] = v;
      }
    }
    sink(positions, values, n);
  }
  if (!index.finished()) return corrupt("index section has {} bytes left over", h.index_bytes - index.bytes_consumed());
  if (ulp ? !ulp_values.finished() : raw_offset != value_section.size()) {
    return corrupt("value section has bytes left over");
  }
  return Status();
}

template <typename U>
Status apply_sparse(const ChunkHeader& h, std::span<const uint8_t> body, uint8_t* range_start) {
  U* out = reinterpret_cast<U*>(range_start);
  constexpr unsigned kBits = sizeof(U) * 8;
  if (static_cast<ValueCodec>(h.value_codec) == ValueCodec::kUlp) {
    return walk_sparse(h, body, sizeof(U), [out](const uint64_t* pos, const uint64_t* val, size_t n) {
      for (size_t k = 0; k < n; ++k) out[pos[k]] = static_cast<U>(ulp_decode(out[pos[k]], val[k], kBits));
    });
  }
  return walk_sparse(h, body, sizeof(U), [out](const uint64_t* pos, const uint64_t* val, size_t n) {
    for (size_t k = 0; k < n; ++k) out[pos[k]] = static_cast<U>(val[k]);
  });
}

}  // namespace

Status verify_chunk_body(const ChunkHeader& h, std::span<const uint8_t> raw_body, DType dtype) {
  if (raw_body.size() != h.raw_body_bytes) return corrupt("chunk body is {} bytes, header says {}", raw_body.size(), h.raw_body_bytes);
  if (h.kind == ChunkKind::kDense) return Status();  // any bytes are valid elements
  return walk_sparse(h, raw_body, dtype_size(dtype), [](const uint64_t*, const uint64_t*, size_t) {});
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
    case 1: return apply_sparse<uint8_t>(h, raw_body, range_start);
    case 2: return apply_sparse<uint16_t>(h, raw_body, range_start);
    case 4: return apply_sparse<uint32_t>(h, raw_body, range_start);
    case 8: return apply_sparse<uint64_t>(h, raw_body, range_start);
    default: return internal_error("element size {} unsupported", elem_size);
  }
}

}  // namespace deltacast
