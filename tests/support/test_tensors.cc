#include "support/test_tensors.h"

#include <algorithm>
#include <unordered_set>

#include "sparse/value_codec.h"

namespace deltacast::testing {

GuardedTensor::GuardedTensor(DType dtype, uint64_t numel)
    : dtype_(dtype), numel_(numel), buffer_(2 * kGuard + numel * dtype_size(dtype)) {
  std::memset(buffer_.data(), kGuardByte, kGuard);
  std::memset(buffer_.data() + kGuard + nbytes(), kGuardByte, kGuard);
  // The data itself starts zero (AlignedBuffer is zero-filled).
}

bool GuardedTensor::guards_intact() const {
  const uint8_t* before = buffer_.data();
  const uint8_t* after = buffer_.data() + kGuard + nbytes();
  for (size_t i = 0; i < kGuard; ++i) {
    if (before[i] != kGuardByte || after[i] != kGuardByte) return false;
  }
  return true;
}

TensorSet::TensorSet(const Manifest& manifest) {
  tensors.reserve(manifest.size());
  for (const auto& spec : manifest.tensors()) tensors.emplace_back(spec.dtype, spec.numel());
}

std::vector<TensorView> TensorSet::views() const {
  std::vector<TensorView> v;
  for (const auto& t : tensors) v.push_back(t.view());
  return v;
}

bool TensorSet::guards_intact() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const GuardedTensor& t) { return t.guards_intact(); });
}

bool TensorSet::same_bits(const TensorSet& other) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].same_bits(other.tensors[i])) return false;
  }
  return true;
}

void TensorSet::copy_from(const TensorSet& other) {
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_from(other.tensors[i]);
}

void fill_random_bits(GuardedTensor& t, std::mt19937_64& rng) {
  uint8_t* p = t.data();
  const uint64_t n = t.nbytes();
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(p + i, &r, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(rng());
}

void fill_random_bits(TensorSet& set, std::mt19937_64& rng) {
  for (auto& t : set.tensors) fill_random_bits(t, rng);
}

uint64_t element_bits(const GuardedTensor& t, uint64_t i) {
  const unsigned size = dtype_size(t.view().dtype);
  uint64_t v = 0;
  std::memcpy(&v, t.data() + i * size, size);
  return v;
}

void set_element_bits(GuardedTensor& t, uint64_t i, uint64_t bits) {
  const unsigned size = dtype_size(t.view().dtype);
  std::memcpy(t.data() + i * size, &bits, size);
}

void apply_random_changes(GuardedTensor& t, uint64_t changes, std::mt19937_64& rng) {
  const uint64_t n = t.view().numel;
  changes = std::min(changes, n);
  std::vector<uint64_t> positions;
  if (changes * 2 > n) {
    positions.resize(n);
    for (uint64_t i = 0; i < n; ++i) positions[i] = i;
    std::shuffle(positions.begin(), positions.end(), rng);
    positions.resize(changes);
  } else {
    std::unordered_set<uint64_t> chosen;
    while (chosen.size() < changes) chosen.insert(rng() % n);
    positions.assign(chosen.begin(), chosen.end());
  }
  const unsigned bits = dtype_size(t.view().dtype) * 8;
  const uint64_t mask = width_mask(bits);
  for (uint64_t p : positions) {
    const uint64_t old = element_bits(t, p);
    uint64_t next = old;
    while (next == old) {
      if (rng() & 1) {
        const int64_t step = static_cast<int64_t>(rng() % 7) - 3;  // a few representable values either way
        next = float_unkey((float_key(old, bits) + static_cast<uint64_t>(step)) & mask, bits);
      } else {
        next = rng() & mask;
      }
    }
    set_element_bits(t, p, next);
  }
}

void random_version_pair(TensorSet& base, TensorSet& current, double density, std::mt19937_64& rng) {
  fill_random_bits(base, rng);
  current.copy_from(base);
  for (auto& t : current.tensors) {
    apply_random_changes(t, static_cast<uint64_t>(density * static_cast<double>(t.view().numel)), rng);
  }
}

Manifest make_manifest(std::vector<TensorSpec> specs) {
  auto m = Manifest::create(std::move(specs));
  if (!m.ok()) throw std::runtime_error(m.status().to_string());
  return std::move(m).value();
}

}  // namespace deltacast::testing
