#include "sparse/shadow.h"

#include <cstring>

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

}  // namespace deltacast
