#include "sparse/model_image.h"

#include <algorithm>
#include <cstring>

#include "core/hash.h"
#include "core/parallel_memory.h"

namespace deltacast {

namespace {
constexpr uint64_t kPieceBytes = kParallelPieceBytes;
static_assert(kPieceBytes % kHashLeafBytes == 0, "stretches of the image are whole leaves");
}  // namespace

ModelImage::ModelImage(const Manifest& manifest) {
  offsets_.reserve(manifest.size());
  for (size_t i = 0; i < manifest.size(); ++i) {
    offsets_.push_back(bytes_);
    tensors_.emplace_back(manifest[i].dtype, manifest[i].numel());
    const uint64_t n = manifest[i].nbytes();
    for (uint64_t at = 0; at < n; at += kPieceBytes) {
      pieces_.push_back(Piece{static_cast<uint32_t>(i), at, std::min(kPieceBytes, n - at)});
    }
    bytes_ += n;
  }
}

std::vector<TensorView> ModelImage::views_of(const uint8_t* image) const {
  std::vector<TensorView> views;
  views.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    // Views carry a mutable pointer; the callers only read through these.
    views.push_back(TensorView{const_cast<uint8_t*>(image) + offsets_[i], tensors_[i].first, tensors_[i].second, Device{}});
  }
  return views;
}

void ModelImage::unpack_remapped(const uint8_t* image, const Layout& layout, std::span<const TensorView> locals,
                                 ThreadPool& pool) const {
  gather_views(layout, views_of(image), locals, &pool);
}

void ModelImage::copy_out(std::span<const TensorView> tensors, uint64_t at, uint64_t length, uint8_t* image) const {
  // The last tensor starting at or before `at` (empty tensors share their successor's offset).
  size_t t = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), at) - offsets_.begin()) - 1;
  while (length > 0) {
    const uint64_t end = t + 1 < offsets_.size() ? offsets_[t + 1] : bytes_;
    const uint64_t n = std::min(length, end - at);
    if (n > 0) std::memcpy(image + at, tensors[t].bytes() + (at - offsets_[t]), n);
    at += n;
    length -= n;
    ++t;
  }
}

std::vector<uint64_t> ModelImage::pack(std::span<const TensorView> tensors, uint8_t* image, ThreadPool& pool) const {
  // Work goes out in stretches of the image (whole leaves), each copied a leaf at a time from
  // whichever tensors it spans, and every leaf hashed as soon as it is in place.
  std::vector<uint64_t> leaves(content_hash_leaf_count(bytes_));
  if (bytes_ == 0) {
    leaves[0] = xxh3_64(image, 0);
    return leaves;
  }
  constexpr uint64_t kLeavesPerStretch = kPieceBytes / kHashLeafBytes;
  const size_t stretches = (leaves.size() + kLeavesPerStretch - 1) / kLeavesPerStretch;
  pool.parallel_for(stretches, [&](size_t stretch) {
    const size_t last = std::min<size_t>(leaves.size(), (stretch + 1) * kLeavesPerStretch);
    for (size_t leaf = stretch * kLeavesPerStretch; leaf < last; ++leaf) {
      const uint64_t at = leaf * kHashLeafBytes;
      const uint64_t length = std::min<uint64_t>(kHashLeafBytes, bytes_ - at);
      copy_out(tensors, at, length, image);
      leaves[leaf] = xxh3_64(image + at, length);
    }
  });
  return leaves;
}

void ModelImage::unpack(const uint8_t* image, std::span<const TensorView> tensors, ThreadPool& pool) const {
  pool.parallel_for(pieces_.size(), [&](size_t i) {
    const Piece& p = pieces_[i];
    std::memcpy(tensors[p.tensor].bytes() + p.offset, image + offsets_[p.tensor] + p.offset, p.length);
  });
}

}  // namespace deltacast
