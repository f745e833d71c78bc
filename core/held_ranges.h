// What a process holds of a producer's tensors, as the producer sees it:
// per tensor, sorted, disjoint [begin, end) ranges of flattened elements. A
// resharded consumer derives it from its composed layout (core/layout.h) and
// sends it at join; the producer routes to it only the chunks it intersects.
// Declarations arrive over the network: create() checks every range against
// the tensors and bounds their number.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/manifest.h"
#include "core/status.h"

namespace deltacast {

struct HeldRange {
  uint32_t tensor = 0;
  uint64_t begin = 0;
  uint64_t end = 0;

  friend bool operator==(const HeldRange&, const HeldRange&) = default;
};

class HeldRanges {
 public:
  static constexpr size_t kMaxRanges = size_t{1} << 20;

  // Sorts and merges `ranges` (overlapping and touching ones become one); each must lie inside
  // its tensor of `manifest` and not be empty. Errors name the tensor.
  static Result<HeldRanges> create(const Manifest& manifest, std::vector<HeldRange> ranges);
  // What `layout` holds of its logical tensors (a composed layout: of a producer's tensors).
  static HeldRanges of(const Layout& layout);

  std::span<const HeldRange> ranges() const { return ranges_; }
  // Whether any element of tensor `tensor` in [begin, end) is held.
  bool intersects(uint32_t tensor, uint64_t begin, uint64_t end) const;
  // Per tensor (`tensors` of them), the sorted offsets where held ranges start or end: where
  // chunks must be cut so that none is partly held.
  std::vector<std::vector<uint64_t>> edges(size_t tensors) const;
  uint64_t held_elements() const;
  // Equal ranges, equal hash: consumers that hold the same elements form one class.
  uint64_t hash() const;

  friend bool operator==(const HeldRanges&, const HeldRanges&) = default;

 private:
  static std::vector<HeldRange> normalized(std::vector<HeldRange> ranges);

  std::vector<HeldRange> ranges_;
};

}  // namespace deltacast
