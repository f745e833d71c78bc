// Named tensors handed over as DLPack capsules (`tensor.__dlpack__()`):
// checked (host memory or a CUDA GPU, contiguous, a dtype deltacast knows, one lane),
// described as a Manifest plus views of their memory, in place, and kept
// alive until the engine that reads or writes them is gone.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "core/manifest.h"
#include "core/tensor_view.h"
#include "dlpack.h"

namespace deltacast::python {

class ImportedTensors {
 public:
  // Raises deltacast.errors exceptions naming the offending tensor. `dtypes`: per tensor a
  // deltacast dtype name that replaces the DLPack one of the same width (bf16 or float8 held in
  // integer arrays, as numpy holds them), or "" to keep it.
  ImportedTensors(const std::vector<std::string>& names, const std::vector<pybind11::capsule>& capsules,
                  const std::vector<std::string>& dtypes);
  ImportedTensors(const ImportedTensors&) = delete;
  ImportedTensors& operator=(const ImportedTensors&) = delete;

  const Manifest& manifest() const { return manifest_; }
  const std::vector<TensorView>& views() const { return views_; }

 private:
  // Calls each capsule's deleter (with the GIL held: the frameworks' deleters touch Python
  // objects); a member, so that it also runs when the constructor raises half-way.
  struct Owned {
    std::vector<dlpack::ManagedTensor*> tensors;
    Owned() = default;
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned();
  };
  Owned owned_;
  std::vector<TensorView> views_;
  Manifest manifest_;
};

}  // namespace deltacast::python
