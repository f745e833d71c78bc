// DeviceTensors in a build without CUDA: refused, saying why.
#include "sync/device_tensors.h"

namespace deltacast::bench {

Result<std::unique_ptr<DeviceTensors>> DeviceTensors::allocate(const std::vector<TensorSpec>&, int) {
  return unimplemented("--device cuda: this build has no CUDA support (configure with -DDELTACAST_CUDA=ON on a machine "
                       "with nvcc)");
}

}  // namespace deltacast::bench
