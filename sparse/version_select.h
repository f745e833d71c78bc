// Routing by need for resharded versions: a trainer rank's version cut down to
// the chunks that one receiver holds any element of (its layout composed with
// the rank's, core/layout.h; what it holds, core/held_ranges.h). The chunks go
// byte for byte as the rank encoded them; only the buckets are rebuilt,
// flagged `selected` (sparse/FORMAT.md). With the encoder's chunks cut at the
// receivers' edges (HeldRanges::edges and plan_chunk_ranges), no chunk is
// partly needed, so a receiver gets its share of the version and nothing else.
#pragma once

#include "core/held_ranges.h"
#include "core/manifest.h"
#include "core/thread_pool.h"
#include "sparse/codec_options.h"
#include "sparse/delta_encoder.h"

namespace deltacast {

// The chunks of `version` (encoded for `manifest`) that intersect `need`, in new buckets of at
// most options.bucket_bytes. Errors if a bucket does not read back (it was encoded for another
// manifest, or is damaged).
Result<EncodedVersion> select_chunks(const EncodedVersion& version, const Manifest& manifest, const HeldRanges& need,
                                     const CodecOptions& options, ThreadPool& pool);

}  // namespace deltacast
