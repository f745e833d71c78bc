#include "sparse/shadow.h"

#include <cstring>

#include "core/parallel_memory.h"

namespace deltacast {

Result<Shadow> Shadow::copy_of(const Manifest& manifest, std::span<const TensorView> tensors, uint64_t version) {
  DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  if (version == 0) return invalid_argument("version 0 means 'nothing held'; versions start at 1");
  Shadow shadow;
  shadow.version_ = version;
  shadow.manifest_hash_ = manifest.hash();
  shadow.storage_.reserve(tensors.size());
  shadow.views_.reserve(tensors.size());
  for (const TensorView& t : tensors) {
    if (!t.device.is_cpu()) return invalid_argument("the CPU shadow needs host tensors");
    AlignedBuffer& buffer = shadow.storage_.emplace_back(t.nbytes());
    if (t.nbytes() > 0) std::memcpy(buffer.data(), t.data, t.nbytes());
    shadow.views_.push_back(TensorView{buffer.data(), t.dtype, t.numel, Device{}});
  }
  return shadow;
}

Shadow Shadow::allocate(const Manifest& manifest, ThreadPool& pool) {
  Shadow shadow;
  shadow.manifest_hash_ = manifest.hash();
  shadow.storage_.reserve(manifest.size());
  for (const TensorSpec& spec : manifest.tensors()) {
    AlignedBuffer& buffer = shadow.storage_.emplace_back(spec.nbytes());
    touch_pages(buffer.data(), buffer.size(), pool);
    shadow.views_.push_back(TensorView{buffer.data(), spec.dtype, spec.numel(), Device{}});
  }
  return shadow;
}

Status Shadow::assign(std::span<const TensorView> tensors, uint64_t version, ThreadPool* pool) {
  if (tensors.size() != views_.size()) return mismatch("{} tensors for a shadow of {}", tensors.size(), views_.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].dtype != views_[i].dtype || tensors[i].numel != views_[i].numel || !tensors[i].device.is_cpu()) {
      return mismatch("tensor {} does not match the shadow's", i);
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (views_[i].nbytes() == 0) continue;
    if (pool != nullptr) {
      parallel_copy(views_[i].bytes(), tensors[i].bytes(), views_[i].nbytes(), *pool);
    } else {
      std::memcpy(views_[i].data, tensors[i].data, views_[i].nbytes());
    }
  }
  version_ = version;
  return Status();
}

}  // namespace deltacast
