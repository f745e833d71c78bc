// Test helpers: tensors with guard bytes on both sides (to prove nothing is
// written outside a target), random bit patterns, and small model builders.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/manifest.h"
#include "core/tensor_view.h"

namespace deltacast::testing {

// A host tensor surrounded by guard bytes with a known pattern.
class GuardedTensor {
 public:
  static constexpr size_t kGuard = 256;
  static constexpr uint8_t kGuardByte = 0xA5;

  GuardedTensor(DType dtype, uint64_t numel);

  TensorView view() const { return TensorView{data(), dtype_, numel_, Device{}}; }
  uint8_t* data() const { return buffer_.data() + kGuard; }
  uint64_t nbytes() const { return numel_ * dtype_size(dtype_); }
  std::span<const uint8_t> bytes() const { return {data(), nbytes()}; }
  bool guards_intact() const;
  void copy_from(const GuardedTensor& other) { std::memcpy(data(), other.data(), nbytes()); }
  bool same_bits(const GuardedTensor& other) const { return std::memcmp(data(), other.data(), nbytes()) == 0; }

 private:
  DType dtype_;
  uint64_t numel_;
  AlignedBuffer buffer_;
};

// A set of guarded tensors matching a manifest.
struct TensorSet {
  explicit TensorSet(const Manifest& manifest);
  std::vector<TensorView> views() const;
  bool guards_intact() const;
  bool same_bits(const TensorSet& other) const;
  void copy_from(const TensorSet& other);

  std::vector<GuardedTensor> tensors;
};

// Fills with uniformly random bit patterns (every NaN payload, denormal, -0.0 included).
void fill_random_bits(GuardedTensor& t, std::mt19937_64& rng);
void fill_random_bits(TensorSet& set, std::mt19937_64& rng);

// Changes exactly `changes` distinct elements (positions chosen at random).
// Half of the changes move by a few representable steps (like an optimizer
// step), the rest get a random new bit pattern.
void apply_random_changes(GuardedTensor& t, uint64_t changes, std::mt19937_64& rng);

// `base` gets random bits; `current` becomes a copy of it with `density` of
// each tensor's elements changed (as apply_random_changes does).
void random_version_pair(TensorSet& base, TensorSet& current, double density, std::mt19937_64& rng);

// Reads element i as a zero-extended bit pattern.
uint64_t element_bits(const GuardedTensor& t, uint64_t i);
void set_element_bits(GuardedTensor& t, uint64_t i, uint64_t bits);

Manifest make_manifest(std::vector<TensorSpec> specs);

}  // namespace deltacast::testing
