// Reads one bucket from untrusted bytes: header self-check, manifest, exact
// size, payload checksum, then every chunk header and its placement. Bodies
// are located but not decoded (the chunk decoder does that).
#pragma once

#include <span>
#include <vector>

#include "core/manifest.h"
#include "core/status.h"
#include "sparse/format.h"

namespace deltacast {

struct ChunkRef {
  ChunkHeader header;
  std::span<const uint8_t> body;  // stored body, possibly zstd-compressed
};

struct BucketView {
  BucketHeader header;
  std::vector<ChunkRef> chunks;
};

Result<BucketView> read_bucket(std::span<const uint8_t> bucket, const Manifest& manifest);

}  // namespace deltacast
