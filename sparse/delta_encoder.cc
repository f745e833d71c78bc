#include "sparse/delta_encoder.h"

#include <algorithm>

#include "sparse/bucket_builder.h"

namespace deltacast {

std::vector<ChunkRange> plan_chunk_ranges(const Manifest& manifest, const CodecOptions& options,
                                          std::span<const std::vector<uint64_t>> cuts) {
  std::vector<ChunkRange> ranges;
  for (size_t t = 0; t < manifest.size(); ++t) {
    const TensorSpec& spec = manifest[t];
    const uint64_t numel = spec.numel();
    const uint64_t step = chunk_elements(options, spec.dtype);
    std::vector<uint64_t> ends;
    if (t < cuts.size()) {
      for (uint64_t c : cuts[t]) {
        if (c > 0 && c < numel) ends.push_back(c);
      }
      std::sort(ends.begin(), ends.end());
      ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
    }
    ends.push_back(numel);
    uint64_t start = 0;
    for (uint64_t end : ends) {
      for (; start < end; start += std::min(step, end - start)) {
        ranges.push_back(ChunkRange{static_cast<uint32_t>(t), spec.dtype, start, std::min(step, end - start)});
      }
    }
  }
  return ranges;
}

Result<DeltaEncoder> DeltaEncoder::create(Manifest manifest, CodecOptions options,
                                          std::span<const std::vector<uint64_t>> cuts) {
  DC_RETURN_IF_ERROR(options.validate());
  if (cuts.size() > manifest.size()) {
    return invalid_argument("chunk cuts for {} tensors, the manifest has {}", cuts.size(), manifest.size());
  }
  std::vector<ChunkRange> ranges = plan_chunk_ranges(manifest, options, cuts);
  return DeltaEncoder(std::move(manifest), options, std::move(ranges));
}

DeltaEncoder::DeltaEncoder(Manifest manifest, CodecOptions options, std::vector<ChunkRange> ranges)
    : manifest_(std::move(manifest)),
      options_(options),
      ranges_(std::move(ranges)),
      pool_(std::make_unique<ThreadPool>(options.threads)) {}

Status DeltaEncoder::check_host_views(std::span<const TensorView> tensors) const {
  DC_RETURN_IF_ERROR(manifest_.check_views(tensors));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].device.is_cpu()) return invalid_argument("tensor '{}' is not in host memory", manifest_[i].name);
  }
  return Status();
}

void finish_version(const Manifest& manifest, const CodecOptions& options, std::span<const std::span<const uint8_t>> chunks,
                    ThreadPool& pool, EncodedVersion* version) {
  const BucketStamp stamp{manifest.hash(), version->base_version, version->target_version,
                          version->full ? static_cast<uint32_t>(kBucketFull) : 0u};
  version->buckets = build_buckets(chunks, options.bucket_bytes, stamp, pool);
  version->stats.elements = manifest.total_elements();
  version->stats.dense_bytes = manifest.total_bytes();
  for (const auto& bucket : version->buckets) version->stats.wire_bytes += bucket.size();
}

void add_zstd_stage(std::vector<std::span<const uint8_t>>& chunks, int level, ThreadPool& pool,
                    std::vector<ByteBuffer>& storage) {
  storage.clear();
  storage.resize(chunks.size());
  pool.parallel_for(chunks.size(), [&](size_t i) {
    if (!chunks[i].empty()) compress_chunk(chunks[i], level, &storage[i]);
  });
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].empty()) chunks[i] = storage[i].span();
  }
}

namespace {

std::vector<std::span<const uint8_t>> spans_of(std::span<const ByteBuffer> chunks) {
  std::vector<std::span<const uint8_t>> spans;
  spans.reserve(chunks.size());
  for (const auto& c : chunks) spans.push_back(c.span());
  return spans;
}

}  // namespace

void DeltaEncoder::finish(EncodedVersion* version, std::span<const ByteBuffer> chunks) {
  finish_version(manifest_, options_, spans_of(chunks), *pool_, version);
}

Result<EncodedVersion> DeltaEncoder::encode_delta(std::span<const TensorView> current, Shadow& shadow,
                                                  uint64_t target_version, const ZstdChoice& choose) {
  DC_RETURN_IF_ERROR(check_host_views(current));
  if (shadow.manifest_hash() != manifest_.hash()) return mismatch("the shadow belongs to another manifest");
  if (target_version <= shadow.version()) {
    return invalid_argument("target version {} is not after the shadow's version {}", target_version, shadow.version());
  }
  std::vector<ByteBuffer> chunks(ranges_.size());
  std::vector<uint64_t> changed(ranges_.size());
  std::vector<EncodedAs> encoded_as(ranges_.size());
  pool_->parallel_for(ranges_.size(), [&](size_t i) {
    thread_local ChunkScratch scratch;
    const ChunkRange& r = ranges_[i];
    const uint64_t offset = r.element_start * dtype_size(r.dtype);
    const uint8_t* cur = current[r.tensor_index].bytes() + offset;
    uint8_t* sh = shadow.view(r.tensor_index).bytes() + offset;
    diff_and_update(cur, sh, r.element_count, dtype_size(r.dtype), &scratch.diff);
    changed[i] = scratch.diff.count;
    encoded_as[i] =
        encode_delta_chunk(r, cur, scratch.diff, options_.value_codec, options_.zstd_level, &scratch, &chunks[i]);
  });
  EncodedVersion version;
  version.base_version = shadow.version();
  version.target_version = target_version;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    version.stats.changed += changed[i];
    version.stats.sparse_chunks += encoded_as[i] == EncodedAs::kSparse;
    version.stats.dense_chunks += encoded_as[i] == EncodedAs::kDense;
  }
  version.stats.zstd_level = options_.zstd_level;
  std::vector<std::span<const uint8_t>> spans = spans_of(chunks);
  std::vector<ByteBuffer> compressed;
  if (const int level = options_.zstd_level == 0 && choose ? choose(spans) : 0; level != 0) {
    add_zstd_stage(spans, level, *pool_, compressed);
    version.stats.zstd_level = level;
  }
  finish_version(manifest_, options_, spans, *pool_, &version);
  shadow.set_version(target_version);
  return version;
}

Result<EncodedVersion> DeltaEncoder::encode_full(std::span<const TensorView> tensors, uint64_t version_number) {
  DC_RETURN_IF_ERROR(check_host_views(tensors));
  if (version_number == 0) return invalid_argument("version 0 means 'nothing held' and cannot be published");
  std::vector<ByteBuffer> chunks(ranges_.size());
  pool_->parallel_for(ranges_.size(), [&](size_t i) {
    const ChunkRange& r = ranges_[i];
    encode_dense_chunk(r, tensors[r.tensor_index].bytes() + r.element_start * dtype_size(r.dtype), options_.zstd_level,
                       &chunks[i]);
  });
  EncodedVersion version;
  version.target_version = version_number;
  version.full = true;
  version.stats.changed = manifest_.total_elements();
  version.stats.dense_chunks = ranges_.size();
  version.stats.zstd_level = options_.zstd_level;
  finish(&version, chunks);
  return version;
}

}  // namespace deltacast
