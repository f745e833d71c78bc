// The producer's copy of the last published version: what the next diff is
// taken against. The diff updates it in place, so after encoding version v
// it holds v's bits exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/manifest.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace deltacast {

class Shadow {
 public:
  // Copies `tensors` (host memory) as version `version`.
  static Result<Shadow> copy_of(const Manifest& manifest, std::span<const TensorView> tensors, uint64_t version);
  // Memory for `manifest`'s tensors holding nothing yet (version 0), every page
  // touched (in parallel) so that the first version written into it pays no page faults.
  static Shadow allocate(const Manifest& manifest, ThreadPool& pool);

  // Overwrites the copy with `tensors` (same manifest) as version `version`, in
  // parallel on `pool` if given.
  Status assign(std::span<const TensorView> tensors, uint64_t version, ThreadPool* pool = nullptr);

  uint64_t version() const { return version_; }
  void set_version(uint64_t version) { version_ = version; }
  uint64_t manifest_hash() const { return manifest_hash_; }
  std::span<const TensorView> views() const { return views_; }
  const TensorView& view(size_t i) const { return views_[i]; }

 private:
  std::vector<AlignedBuffer> storage_;
  std::vector<TensorView> views_;
  uint64_t version_ = 0;
  uint64_t manifest_hash_ = 0;
};

}  // namespace deltacast
