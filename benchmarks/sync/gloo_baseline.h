// The torch.distributed (gloo) baseline of deltacast-bench sync: a Python
// helper (gloo_broadcast.py) holding one root and N receiver ranks, started
// once, asked to broadcast the current tensors tensor by tensor after each
// version. The tensors reach it through a file in /dev/shm, written before
// the timed broadcast starts.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "cli/child_process.h"
#include "core/manifest.h"

namespace deltacast::bench {

class GlooBaseline {
 public:
  struct Outcome {
    double seconds = 0;
    bool exact = false;
  };

  // Finds a Python that imports torch.distributed and starts the ranks; an
  // error says why the baseline is unavailable.
  static Result<std::unique_ptr<GlooBaseline>> start(const Manifest& manifest, int receivers);
  ~GlooBaseline();

  Result<Outcome> broadcast(std::span<const TensorView> tensors);
  const std::string& python() const { return python_; }

 private:
  GlooBaseline() = default;

  std::unique_ptr<ChildProcess> helper_;
  std::string python_;
  std::string shapes_path_;
  std::string data_path_;
};

}  // namespace deltacast::bench
