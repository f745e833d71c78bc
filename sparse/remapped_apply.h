// Applying a version of logical tensors to a process that holds views of them
// (core/layout.h): a tensor-parallel rank with its rows of q, k and v fused
// into one tensor, a column shard, a flat shard. Each chunk's elements land
// where the layout puts them; elements the process does not hold are skipped.
#pragma once

#include <span>

#include "core/layout.h"
#include "core/manifest.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "sparse/version_reader.h"

namespace deltacast {

// Writes a version that DeltaApplier::verify() accepted for the logical manifest `logical` into
// `locals` (host tensors matching layout.local_specs()). The reference way: per chunk, the window
// of logical elements it covers is gathered from the local tensors (elements held nowhere read as
// zero: the codec's output for them is thrown away), the chunk is applied to the window exactly as
// to a whole tensor, and the held elements are scattered back. Costs a gather and a scatter of
// every intersecting chunk's whole range; a fast path will decode straight into place.
Status apply_remapped(const VersionChunks& version, const Manifest& logical, const Layout& layout,
                      std::span<const TensorView> locals, ThreadPool& pool);

}  // namespace deltacast
