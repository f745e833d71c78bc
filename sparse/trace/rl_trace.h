// An RL-like training trace: fp32 master weights ~ N(0, sigma), updated by
// Adam (bias-corrected) on i.i.d. N(0, grad_std) gradients, published after
// every step as a narrow copy (bf16 by default) with round-to-nearest-even.
// With lr 3e-7, step 3 changes about 0.8% of the bf16 elements: the bf16
// absorption that makes deltas sparse.
//
// Deterministic for a seed whatever the thread count: random numbers come
// from a generator seeded per (tensor, step, block of elements).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/manifest.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace deltacast {

struct TraceOptions {
  uint64_t seed = 1;
  double lr = 3e-7;
  double init_std = 0.02;
  double grad_std = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  DType publish_dtype = DType::kBF16;  // kBF16, kF16, kF8E4M3, kF8E5M2 or kF32
  unsigned threads = 0;
};

class RlTrace {
 public:
  // `layout` gives names and shapes; their dtype is replaced by publish_dtype.
  static Result<std::unique_ptr<RlTrace>> create(std::vector<TensorSpec> layout, const TraceOptions& options);

  const Manifest& manifest() const { return manifest_; }
  uint64_t steps_done() const { return steps_; }

  // One optimizer step over every tensor; the published copy follows.
  void step();
  // The learning rate of the steps that follow (a larger one changes more published elements).
  Status set_lr(double lr);

  // The published (narrow) tensors, in manifest order. Views stay valid for
  // the trace's lifetime and change in place on step().
  std::span<const TensorView> published() const { return published_views_; }

  // fp32 master weights of tensor i (for tests).
  std::span<const float> master(size_t i) const;

 private:
  RlTrace() = default;
  void initialise();
  void publish(size_t block);

  struct Block {  // unit of parallel work and of random-number streams
    uint32_t tensor;
    uint64_t start;
    uint64_t count;
  };

  TraceOptions options_;
  Manifest manifest_;
  std::vector<AlignedBuffer> master_, m_, v_, published_;
  std::vector<TensorView> published_views_;
  std::vector<Block> blocks_;
  std::unique_ptr<ThreadPool> pool_;
  uint64_t steps_ = 0;
};

}  // namespace deltacast
