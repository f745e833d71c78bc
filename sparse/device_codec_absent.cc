// A build without the CUDA kernels: device tensors are refused with an error that says why.
#include "sparse/device_codec.h"

namespace deltacast {

bool device_codec_built() { return false; }

namespace {
Status not_built() {
  return unimplemented("this build of deltacast has no CUDA kernels (built without nvcc, or with DELTACAST_CUDA=OFF): "
                       "it takes tensors in host memory only");
}
}  // namespace

Result<std::unique_ptr<DeviceEncoder>> make_device_encoder(const Manifest&, const CodecOptions&, int, uintptr_t,
                                                           bool) {
  return not_built();
}

Result<std::unique_ptr<DeviceApplier>> make_device_applier(const Manifest&, int, uintptr_t, unsigned) {
  return not_built();
}

}  // namespace deltacast
