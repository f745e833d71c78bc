#include "sparse/chunk_encoder.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "sparse/format.h"
#include "sparse/pfor.h"
#include "sparse/zstd_stage.h"

namespace deltacast {

namespace {

// Index section: gap before each changed position (the first counted from
// the range start, the others minus one since positions strictly increase).
void append_index_section(const DiffResult& diff, std::vector<uint8_t>* body) {
  const uint64_t* pos = diff.positions.data();
  uint64_t gaps[kPforBlockValues];
  uint64_t next = 0;  // smallest position the next change may have
  for (size_t start = 0; start < diff.count; start += kPforBlockValues) {
    const size_t n = std::min(kPforBlockValues, diff.count - start);
    for (size_t k = 0; k < n; ++k) {
      gaps[k] = pos[start + k] - next;
      next = pos[start + k] + 1;
    }
    const size_t at = body->size();
    body->resize(at + pfor_max_block_bytes(n));
    body->resize(at + pfor_encode_block(gaps, n, body->data() + at));
  }
}

void append_ulp_values(const DiffResult& diff, unsigned bits, std::vector<uint8_t>* body) {
  const uint64_t* old_bits = diff.old_bits.data();
  const uint64_t* new_bits = diff.new_bits.data();
  uint64_t values[kPforBlockValues];
  for (size_t start = 0; start < diff.count; start += kPforBlockValues) {
    const size_t n = std::min(kPforBlockValues, diff.count - start);
    for (size_t k = 0; k < n; ++k) values[k] = ulp_encode(old_bits[start + k], new_bits[start + k], bits);
    const size_t at = body->size();
    body->resize(at + pfor_max_block_bytes(n));
    body->resize(at + pfor_encode_block(values, n, body->data() + at));
  }
}

void append_raw_values(const DiffResult& diff, unsigned elem_size, std::vector<uint8_t>* body) {
  const size_t at = body->size();
  body->resize(at + diff.count * elem_size);
  uint8_t* p = body->data() + at;
  const uint64_t* new_bits = diff.new_bits.data();
  // Little-endian host: the low `elem_size` bytes of the u64 are the element.
  for (size_t k = 0; k < diff.count; ++k, p += elem_size) std::memcpy(p, &new_bits[k], elem_size);
}

// Writes header + (possibly compressed) body + padding for a finished raw body.
void emit_chunk(ChunkHeader header, std::span<const uint8_t> raw_body, int zstd_level, std::vector<uint8_t>* out) {
  const size_t start = out->size();
  out->resize(start + ChunkHeader::kBytes);
  header.raw_body_bytes = raw_body.size();
  header.compression = Compression::kNone;
  if (zstd_level != 0 && zstd_compress_if_smaller(raw_body, zstd_level, out)) {
    header.compression = Compression::kZstd;
  } else {
    out->insert(out->end(), raw_body.begin(), raw_body.end());
  }
  header.body_bytes = out->size() - start - ChunkHeader::kBytes;
  header.write(out->data() + start);
  out->resize(start + header.stored_bytes(), 0);
}

ChunkHeader header_for(const ChunkRange& range, ChunkKind kind) {
  ChunkHeader h;
  h.tensor_index = range.tensor_index;
  h.kind = kind;
  h.element_start = range.element_start;
  h.element_count = range.element_count;
  return h;
}

}  // namespace

void encode_dense_chunk(const ChunkRange& range, const uint8_t* current, int zstd_level, std::vector<uint8_t>* out) {
  ChunkHeader h = header_for(range, ChunkKind::kDense);
  h.nnz = range.element_count;
  emit_chunk(h, {current, range.element_count * dtype_size(range.dtype)}, zstd_level, out);
}

EncodedAs encode_delta_chunk(const ChunkRange& range, const uint8_t* current, const DiffResult& diff, ValueCodec codec,
                        int zstd_level, ChunkScratch* scratch, std::vector<uint8_t>* out) {
  if (diff.count == 0) return EncodedAs::kNothing;
  const unsigned elem_size = dtype_size(range.dtype);
  const ValueCodec effective = effective_value_codec(codec, range.dtype);
  std::vector<uint8_t>& body = scratch->body;
  body.clear();
  append_index_section(diff, &body);
  const size_t index_bytes = body.size();
  if (effective == ValueCodec::kUlp) {
    append_ulp_values(diff, elem_size * 8, &body);
  } else {
    append_raw_values(diff, elem_size, &body);
  }
  if (body.size() >= range.element_count * elem_size) {
    encode_dense_chunk(range, current, zstd_level, out);
    return EncodedAs::kDense;
  }
  ChunkHeader h = header_for(range, ChunkKind::kSparse);
  h.value_codec = static_cast<uint8_t>(effective);
  h.nnz = diff.count;
  h.index_bytes = index_bytes;
  emit_chunk(h, body, zstd_level, out);
  return EncodedAs::kSparse;
}

}  // namespace deltacast
