#include "sparse/version_reader.h"

#include <algorithm>

#include "sparse/bucket_reader.h"
#include "sparse/zstd_stage.h"

namespace deltacast {

namespace {

Status check_version_set(std::span<const BucketView> views, std::optional<uint64_t> held_version) {
  const BucketHeader& first = views[0].header;
  if (first.bucket_count != views.size()) {
    return corrupt("version {} has {} buckets, {} were given", first.target_version, first.bucket_count, views.size());
  }
  std::vector<bool> seen(views.size(), false);
  for (const BucketView& v : views) {
    const BucketHeader& h = v.header;
    if (h.base_version != first.base_version || h.target_version != first.target_version ||
        h.bucket_count != first.bucket_count || h.flags != first.flags) {
      return corrupt("bucket {} belongs to version {}->{}, not {}->{}", h.bucket_index, h.base_version,
                     h.target_version, first.base_version, first.target_version);
    }
    if (seen[h.bucket_index]) return corrupt("bucket {} of version {} given twice", h.bucket_index, h.target_version);
    seen[h.bucket_index] = true;
  }
  if (!first.full()) {
    if (!held_version) {
      return failed_precondition("version {} is a delta from {}, and nothing is held yet: a full sync is needed",
                                 first.target_version, first.base_version);
    }
    if (*held_version != first.base_version) {
      return failed_precondition("version {} is a delta from {}, but version {} is held", first.target_version,
                                 first.base_version, *held_version);
    }
  }
  return Status();
}

// Chunks must not overlap; a full sync must also cover every element (or, selected, every
// element of `need`).
Status check_ranges(const VersionChunks& version, const Manifest& manifest, const HeldRanges* need) {
  struct Range {
    uint32_t tensor;
    uint64_t start;
    uint64_t count;
  };
  std::vector<Range> ranges;
  ranges.reserve(version.chunks.size());
  for (const auto& c : version.chunks) {
    ranges.push_back({c.header.tensor_index, c.header.element_start, c.header.element_count});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.start < b.start;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (ranges[i - 1].tensor == r.tensor && ranges[i - 1].start + ranges[i - 1].count > r.start) {
      return corrupt("chunks overlap in tensor '{}' at element {}", manifest[r.tensor].name, r.start);
    }
  }
  if (version.full && need != nullptr) {
    // Selected for this reader: every run it holds lies in chunks that follow each other.
    const auto by_start = [](const Range& a, const Range& b) {
      return a.tensor != b.tensor ? a.tensor < b.tensor : a.start < b.start;
    };
    for (const HeldRange& run : need->ranges()) {
      const uint64_t run_end = run.end;
      auto it = std::upper_bound(ranges.begin(), ranges.end(), Range{run.tensor, run.begin, 0}, by_start);
      uint64_t reached = run.begin;  // covered from the range's start up to here
      if (it != ranges.begin()) {
        const Range& before = *std::prev(it);  // the last chunk starting at or before the range
        if (before.tensor == run.tensor && before.start + before.count > run.begin) reached = before.start + before.count;
      }
      for (; reached < run_end && it != ranges.end() && it->tensor == run.tensor && it->start == reached; ++it) {
        reached = it->start + it->count;
      }
      if (reached < run_end) {
        return corrupt("full sync leaves elements [{}, {}) of tensor '{}' unset", reached, run_end,
                       run.tensor < manifest.size() ? manifest[run.tensor].name : "?");
      }
    }
    return Status();
  }
  // covered[t]: elements of tensor t covered so far, as one contiguous prefix (full syncs only).
  std::vector<uint64_t> covered(version.full ? manifest.size() : 0, 0);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (version.full) {
      if (r.start != covered[r.tensor]) {
        return corrupt("full sync leaves elements [{}, {}) of tensor '{}' unset", covered[r.tensor], r.start,
                       manifest[r.tensor].name);
      }
      covered[r.tensor] = r.start + r.count;
    }
  }
  for (size_t t = 0; t < covered.size(); ++t) {
    if (covered[t] != manifest[t].numel()) {
      return corrupt("full sync leaves elements [{}, {}) of tensor '{}' unset", covered[t], manifest[t].numel(),
                     manifest[t].name);
    }
  }
  return Status();
}

}  // namespace

Result<VersionChunks> read_version(const Manifest& manifest, std::span<const std::span<const uint8_t>> buckets,
                                   std::optional<uint64_t> held_version, ThreadPool& pool, const HeldRanges* need) {
  if (buckets.empty()) return invalid_argument("no buckets given");
  std::vector<Result<BucketView>> read(buckets.size(), Status(StatusCode::kInternal, "not read"));
  pool.parallel_for(buckets.size(), [&](size_t i) { read[i] = read_bucket(buckets[i], manifest); });
  std::vector<BucketView> views;
  views.reserve(buckets.size());
  for (auto& r : read) {
    if (!r.ok()) return r.status();
    views.push_back(std::move(r).value());
  }
  DC_RETURN_IF_ERROR(check_version_set(views, held_version));
  if (views[0].header.selected() && need == nullptr) {
    return invalid_argument("version {} was cut down to one receiver's layout: read it with that layout",
                            views[0].header.target_version);
  }

  VersionChunks version;
  version.manifest_hash = manifest.hash();
  version.base_version = views[0].header.base_version;
  version.target_version = views[0].header.target_version;
  version.full = views[0].header.full();
  std::sort(views.begin(), views.end(),
            [](const BucketView& a, const BucketView& b) { return a.header.bucket_index < b.header.bucket_index; });
  for (const BucketView& v : views) {
    for (const ChunkRef& c : v.chunks) {
      if (version.full && c.header.kind != ChunkKind::kDense) return corrupt("a full sync holds a sparse chunk");
      version.chunks.push_back(ChunkBody{c.header, c.body});
    }
  }
  DC_RETURN_IF_ERROR(check_ranges(version, manifest, views[0].header.selected() ? need : nullptr));

  version.decompressed.resize(version.chunks.size());
  DC_RETURN_IF_ERROR(parallel_for_status(pool, version.chunks.size(), [&](size_t i) -> Status {
    ChunkBody& c = version.chunks[i];
    if (c.header.compression != Compression::kZstd) return Status();
    std::vector<uint8_t>& out = version.decompressed[i];
    out.resize(c.header.raw_body_bytes);  // bounded by the range's dense size (check_chunk_header)
    DC_RETURN_IF_ERROR(zstd_decompress_exact(c.raw_body, out.data(), out.size()).with_context(fmt::format("chunk {}", i)));
    c.raw_body = out;
    return Status();
  }));
  return version;
}

}  // namespace deltacast
