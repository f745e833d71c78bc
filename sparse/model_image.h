// A full version as it travels: the model's bytes, tensor after tensor in
// manifest order, with nothing around them (no headers, no padding). Both
// ends derive the layout from the manifest (whose hash they agreed on at
// join), so a full sync needs no encoding: the producer copies the shadow
// into the image, the consumer copies the image into its tensors, one memcpy
// per piece of each tensor, in parallel. Integrity is the transfer's (slice
// checksums and the digest announced with the version).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/layout.h"
#include "core/manifest.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace deltacast {

class ModelImage {
 public:
  explicit ModelImage(const Manifest& manifest);

  uint64_t bytes() const { return bytes_; }
  // Where tensor i starts in the image.
  uint64_t offset(size_t tensor) const { return offsets_[tensor]; }

  // Copies `tensors` (host memory, matching the manifest) into `image` (bytes() long) and
  // returns the image's content-hash leaf digests (core/hash.h), each leaf hashed right after
  // its bytes were copied, while they are in cache: the round derives every slice's checksum
  // from them instead of reading the image again.
  std::vector<uint64_t> pack(std::span<const TensorView> tensors, uint8_t* image, ThreadPool& pool) const;
  // Copies `image` into `tensors`.
  void unpack(const uint8_t* image, std::span<const TensorView> tensors, ThreadPool& pool) const;
  // The image's tensors where they sit in `image`, as views (of the manifest's dtypes and sizes).
  std::vector<TensorView> views_of(const uint8_t* image) const;
  // Copies what `layout` holds of the image's tensors into `locals` (host tensors matching
  // layout.local_specs(); the layout's logical tensors are the manifest's): a full version
  // written into a process that holds views of the tensors (a resharded consumer).
  void unpack_remapped(const uint8_t* image, const Layout& layout, std::span<const TensorView> locals,
                       ThreadPool& pool) const;

 private:
  // A piece of one tensor: the unit of parallel copying.
  struct Piece {
    uint32_t tensor = 0;
    uint64_t offset = 0;  // within the tensor
    uint64_t length = 0;
  };

  // Copies image bytes [at, at + length) from the tensors they belong to.
  void copy_out(std::span<const TensorView> tensors, uint64_t at, uint64_t length, uint8_t* image) const;

  std::vector<uint64_t> offsets_;
  std::vector<std::pair<DType, uint64_t>> tensors_;  // per tensor: dtype, elements
  std::vector<Piece> pieces_;
  uint64_t bytes_ = 0;
};

}  // namespace deltacast
