#include "sparse/chunk_encoder.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "sparse/format.h"
#include "sparse/pfor.h"
#include "sparse/zstd_stage.h"

namespace deltacast {

namespace {

// The sparse body is a run of groups of up to 128 changes: each group's PFOR
// block of gaps (before each changed position; the first counted from the
// range start, the others minus one since positions strictly increase),
// followed by its values (a PFOR block of ulp steps, or the raw patterns).
// Groups are self-contained, so an encoder can emit them as changes stream in.
void append_groups(const DiffResult& diff, ValueCodec codec, unsigned elem_size, ByteBuffer* body) {
  const uint64_t* pos = diff.positions.data();
  const uint64_t* old_bits = diff.old_bits.data();
  const uint64_t* new_bits = diff.new_bits.data();
  const unsigned bits = elem_size * 8;
  uint64_t scratch[kPforBlockValues];
  uint64_t next = 0;  // smallest position the next change may have
  for (size_t start = 0; start < diff.count; start += kPforBlockValues) {
    const size_t n = std::min(kPforBlockValues, diff.count - start);
    for (size_t k = 0; k < n; ++k) {
      scratch[k] = pos[start + k] - next;
      next = pos[start + k] + 1;
    }
    pfor_append_block(scratch, n, body);
    if (codec == ValueCodec::kUlp) {
      for (size_t k = 0; k < n; ++k) scratch[k] = ulp_encode(old_bits[start + k], new_bits[start + k], bits);
      pfor_append_block(scratch, n, body);
    } else {
      // Little-endian host: the low `elem_size` bytes of the u64 are the element.
      uint8_t* p = body->extend(n * elem_size);
      for (size_t k = 0; k < n; ++k, p += elem_size) std::memcpy(p, &new_bits[start + k], elem_size);
    }
  }
}

// Writes header + (possibly compressed) body + padding for a finished raw body.
void emit_chunk(ChunkHeader header, std::span<const uint8_t> raw_body, int zstd_level, ByteBuffer* out) {
  const size_t start = out->size();
  out->extend(ChunkHeader::kBytes);
  header.raw_body_bytes = raw_body.size();
  header.compression = Compression::kNone;
  if (zstd_level != 0 && zstd_compress_if_smaller(raw_body, zstd_level, out)) {
    header.compression = Compression::kZstd;
  } else {
    out->append(raw_body.data(), raw_body.size());
  }
  header.body_bytes = out->size() - start - ChunkHeader::kBytes;
  header.write(out->data() + start);
  const size_t padding = header.stored_bytes() - ChunkHeader::kBytes - header.body_bytes;
  std::memset(out->extend(padding), 0, padding);
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

void encode_dense_chunk(const ChunkRange& range, const uint8_t* current, int zstd_level, ByteBuffer* out) {
  ChunkHeader h = header_for(range, ChunkKind::kDense);
  h.nnz = range.element_count;
  emit_chunk(h, {current, range.element_count * dtype_size(range.dtype)}, zstd_level, out);
}

EncodedAs encode_delta_chunk(const ChunkRange& range, const uint8_t* current, const DiffResult& diff, ValueCodec codec,
                             int zstd_level, ChunkScratch* scratch, ByteBuffer* out) {
  if (diff.count == 0) return EncodedAs::kNothing;
  const unsigned elem_size = dtype_size(range.dtype);
  const ValueCodec effective = effective_value_codec(codec, range.dtype);
  ByteBuffer& body = scratch->body;
  body.clear();
  append_groups(diff, effective, elem_size, &body);
  if (body.size() >= range.element_count * elem_size) {
    encode_dense_chunk(range, current, zstd_level, out);
    return EncodedAs::kDense;
  }
  ChunkHeader h = header_for(range, ChunkKind::kSparse);
  h.value_codec = static_cast<uint8_t>(effective);
  h.nnz = diff.count;
  emit_chunk(h, body.span(), zstd_level, out);
  return EncodedAs::kSparse;
}

void compress_chunk(std::span<const uint8_t> chunk, int zstd_level, ByteBuffer* out) {
  ChunkHeader h = *ChunkHeader::parse(chunk);  // the caller's own output: well formed
  emit_chunk(h, chunk.subspan(ChunkHeader::kBytes, h.body_bytes), zstd_level, out);
}

}  // namespace deltacast
