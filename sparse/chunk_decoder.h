// Decoding of one chunk from untrusted bytes, in two passes that share one
// walker: verify (decode everything, write nothing) and apply (decode again
// and write into the target). A version is applied only after every chunk of
// it verified, so a bad chunk leaves the target untouched.
#pragma once

#include <cstdint>
#include <span>

#include "core/manifest.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "sparse/format.h"

namespace deltacast {

// Checks a chunk header against the manifest: tensor index, element range,
// codec allowed for the dtype, section sizes consistent with each other.
// Bounds every size by the range's dense bytes, so nothing a forged header
// says can make a reader allocate more than the target tensor's size.
Status check_chunk_header(const ChunkHeader& header, const Manifest& manifest);

// Decodes the (decompressed) body without writing anything.
Status verify_chunk_body(const ChunkHeader& header, std::span<const uint8_t> raw_body, DType dtype);

// Decodes the body and writes the new values into `target` (the whole tensor).
// Only elements inside [element_start, element_start + element_count) are
// written. Re-checks everything it reads, so it is safe on unverified input,
// but a failure here may leave earlier elements of the chunk written.
Status apply_chunk_body(const ChunkHeader& header, std::span<const uint8_t> raw_body, const TensorView& target);

}  // namespace deltacast
