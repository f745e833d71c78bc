#include "sparse/model_image.h"

#include <algorithm>
#include <cstring>

namespace deltacast {

namespace {
// Large enough that a copy runs at memory speed, small enough to spread a model over every thread.
constexpr uint64_t kPieceBytes = 4 << 20;
}  // namespace

ModelImage::ModelImage(const Manifest& manifest) {
  offsets_.reserve(manifest.size());
  for (size_t i = 0; i < manifest.size(); ++i) {
    offsets_.push_back(bytes_);
    const uint64_t n = manifest[i].nbytes();
    for (uint64_t at = 0; at < n; at += kPieceBytes) {
      pieces_.push_back(Piece{static_cast<uint32_t>(i), at, std::min(kPieceBytes, n - at)});
    }
    bytes_ += n;
  }
}

void ModelImage::pack(std::span<const TensorView> tensors, uint8_t* image, ThreadPool& pool) const {
  pool.parallel_for(pieces_.size(), [&](size_t i) {
    const Piece& p = pieces_[i];
    std::memcpy(image + offsets_[p.tensor] + p.offset, tensors[p.tensor].bytes() + p.offset, p.length);
  });
}

void ModelImage::unpack(const uint8_t* image, std::span<const TensorView> tensors, ThreadPool& pool) const {
  pool.parallel_for(pieces_.size(), [&](size_t i) {
    const Piece& p = pieces_[i];
    std::memcpy(tensors[p.tensor].bytes() + p.offset, image + offsets_[p.tensor] + p.offset, p.length);
  });
}

}  // namespace deltacast
