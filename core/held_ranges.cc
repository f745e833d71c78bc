#include "core/held_ranges.h"

#include <algorithm>

#include "core/hash.h"

namespace deltacast {

std::vector<HeldRange> HeldRanges::normalized(std::vector<HeldRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const HeldRange& a, const HeldRange& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.begin < b.begin;
  });
  std::vector<HeldRange> out;
  for (const HeldRange& r : ranges) {
    if (!out.empty() && out.back().tensor == r.tensor && r.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

Result<HeldRanges> HeldRanges::create(const Manifest& manifest, std::vector<HeldRange> ranges) {
  if (ranges.size() > kMaxRanges) return invalid_argument("{} held ranges; at most {} are accepted", ranges.size(), kMaxRanges);
  for (const HeldRange& r : ranges) {
    if (r.tensor >= manifest.size()) {
      return invalid_argument("a held range names tensor {}; there are {}", r.tensor, manifest.size());
    }
    if (r.begin >= r.end || r.end > manifest[r.tensor].numel()) {
      return invalid_argument("tensor '{}': held range [{}, {}) is empty or runs past its {} elements",
                              manifest[r.tensor].name, r.begin, r.end, manifest[r.tensor].numel());
    }
  }
  HeldRanges held;
  held.ranges_ = normalized(std::move(ranges));
  return held;
}

HeldRanges HeldRanges::of(const Layout& layout) {
  std::vector<HeldRange> ranges;
  ranges.reserve(layout.runs().size());
  for (const ElementRun& r : layout.runs()) ranges.push_back({r.tensor, r.logical, r.logical + r.length});
  HeldRanges held;
  held.ranges_ = normalized(std::move(ranges));
  return held;
}

bool HeldRanges::intersects(uint32_t tensor, uint64_t begin, uint64_t end) const {
  if (begin >= end) return false;
  // The first range that ends after `begin` (ranges of one tensor are sorted and disjoint).
  const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), HeldRange{tensor, 0, begin},
                                   [](const HeldRange& a, const HeldRange& b) {
                                     return a.tensor != b.tensor ? a.tensor < b.tensor : a.end < b.end;
                                   });
  return it != ranges_.end() && it->tensor == tensor && it->begin < end;
}

std::vector<std::vector<uint64_t>> HeldRanges::edges(size_t tensors) const {
  std::vector<std::vector<uint64_t>> out(tensors);
  for (const HeldRange& r : ranges_) {
    if (r.tensor >= tensors) continue;
    out[r.tensor].push_back(r.begin);
    out[r.tensor].push_back(r.end);
  }
  return out;
}

uint64_t HeldRanges::held_elements() const {
  uint64_t n = 0;
  for (const HeldRange& r : ranges_) n += r.end - r.begin;
  return n;
}

uint64_t HeldRanges::hash() const {
  std::vector<uint64_t> words;
  words.reserve(ranges_.size() * 3);
  for (const HeldRange& r : ranges_) {
    words.push_back(r.tensor);
    words.push_back(r.begin);
    words.push_back(r.end);
  }
  return xxh3_64(words.data(), words.size() * sizeof(uint64_t));
}

}  // namespace deltacast
