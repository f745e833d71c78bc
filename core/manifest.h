// The manifest: the ordered list of tensors (name, dtype, shape) that the
// producer and every consumer agree on. Its hash identifies the layout and
// is stamped on every bucket; a bucket for another layout is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor_view.h"

namespace deltacast {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;

  uint64_t numel() const;
  uint64_t nbytes() const { return numel() * dtype_size(dtype); }
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

class Manifest {
 public:
  // Limits that keep a manifest read from the network from exhausting memory.
  static constexpr size_t kMaxTensors = 1u << 22;
  static constexpr size_t kMaxNameBytes = 4096;
  static constexpr size_t kMaxRank = 16;

  Manifest() = default;
  // Validates names (non-empty, unique), ranks and element counts.
  static Result<Manifest> create(std::vector<TensorSpec> tensors);

  size_t size() const { return tensors_.size(); }
  const TensorSpec& operator[](size_t i) const { return tensors_[i]; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  uint64_t hash() const { return hash_; }
  uint64_t total_elements() const;
  uint64_t total_bytes() const;
  std::optional<size_t> find(std::string_view name) const;

  // Describes the first difference from `other` ("tensor 3 'layer.0.w': dtype bf16 vs f32"),
  // or returns an empty string when the two are identical (first_difference below).
  std::string first_difference(const Manifest& other) const;

  // Checks that `views` matches this manifest one to one (count, dtype, element count).
  Status check_views(std::span<const TensorView> views) const;

  // Stable binary form (the one that is hashed); parse() validates untrusted input.
  std::vector<uint8_t> serialize() const;
  static Result<Manifest> parse(std::span<const uint8_t> bytes);

 private:
  std::vector<TensorSpec> tensors_;
  uint64_t hash_ = 0;
};

// The first difference between two lists of tensors, as Manifest::first_difference describes it
// ("" when they are identical); the lists need not be valid manifests.
std::string first_difference(std::span<const TensorSpec> a, std::span<const TensorSpec> b);

}  // namespace deltacast
