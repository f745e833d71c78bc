#include "core/manifest.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "core/byte_io.h"
#include "core/hash.h"

namespace deltacast {

namespace {

constexpr uint32_t kManifestMagic = 0x4d434c44;  // "DLCM"
constexpr uint16_t kManifestVersion = 1;

std::string shape_string(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Element count of a shape, failing on overflow (the product must fit in 2^63).
Result<uint64_t> checked_numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t dim : shape) {
    if (dim != 0 && n > (uint64_t{1} << 63) / dim)
      return out_of_range("shape {} has too many elements", shape_string(shape));
    n *= dim;
  }
  return n;
}

}  // namespace

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;
  return n;
}

Result<Manifest> Manifest::create(std::vector<TensorSpec> tensors) {
  if (tensors.size() > kMaxTensors)
    return invalid_argument("manifest has {} tensors, the limit is {}", tensors.size(), kMaxTensors);
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty()) return invalid_argument("tensor {} has an empty name", i);
    if (t.name.size() > kMaxNameBytes)
      return invalid_argument("tensor {} name is longer than {} bytes", i, kMaxNameBytes);
    if (t.shape.size() > kMaxRank)
      return invalid_argument("tensor '{}' has rank {}, the limit is {}", t.name, t.shape.size(), kMaxRank);
    if (!names.insert(t.name).second) return invalid_argument("tensor name '{}' appears twice", t.name);
    DC_ASSIGN_OR_RETURN(uint64_t numel, checked_numel(t.shape));
    if (numel > (uint64_t{1} << 62) / dtype_size(t.dtype)) return invalid_argument("tensor '{}' is too large", t.name);
  }
  Manifest m;
  m.tensors_ = std::move(tensors);
  const std::vector<uint8_t> bytes = m.serialize();
  m.hash_ = xxh3_64(bytes.data(), bytes.size());
  return m;
}

uint64_t Manifest::total_elements() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.numel();
  return n;
}

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes();
  return n;
}

std::optional<size_t> Manifest::find(std::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return i;
  }
  return std::nullopt;
}

std::string first_difference(std::span<const TensorSpec> a_list, std::span<const TensorSpec> b_list) {
  const size_t common = std::min(a_list.size(), b_list.size());
  for (size_t i = 0; i < common; ++i) {
    const TensorSpec& a = a_list[i];
    const TensorSpec& b = b_list[i];
    if (a.name != b.name) return fmt::format("tensor {}: name '{}' vs '{}'", i, a.name, b.name);
    if (a.dtype != b.dtype) {
      return fmt::format("tensor {} '{}': dtype {} vs {}", i, a.name, dtype_name(a.dtype), dtype_name(b.dtype));
    }
    if (a.shape != b.shape) {
      return fmt::format("tensor {} '{}': shape {} vs {}", i, a.name, shape_string(a.shape), shape_string(b.shape));
    }
  }
  if (a_list.size() != b_list.size()) {
    const bool first_longer = a_list.size() > b_list.size();
    const TensorSpec& extra = first_longer ? a_list[common] : b_list[common];
    return fmt::format("tensor count {} vs {}: tensor {} '{}' exists only on the {} side", a_list.size(),
                       b_list.size(), common, extra.name, first_longer ? "first" : "second");
  }
  return "";
}

std::string Manifest::first_difference(const Manifest& other) const {
  return deltacast::first_difference(tensors_, other.tensors_);
}

Status Manifest::check_views(std::span<const TensorView> views) const {
  if (views.size() != size()) return mismatch("{} tensors given, the manifest has {}", views.size(), size());
  for (size_t i = 0; i < size(); ++i) {
    const TensorSpec& t = tensors_[i];
    if (views[i].dtype != t.dtype) {
      return mismatch("tensor {} '{}': dtype {} given, manifest says {}", i, t.name, dtype_name(views[i].dtype),
                      dtype_name(t.dtype));
    }
    if (views[i].numel != t.numel()) {
      return mismatch("tensor {} '{}': {} elements given, manifest shape {} has {}", i, t.name, views[i].numel,
                      shape_string(t.shape), t.numel());
    }
    if (views[i].data == nullptr && t.numel() != 0)
      return invalid_argument("tensor {} '{}': null data pointer", i, t.name);
  }
  return Status();
}

std::vector<uint8_t> Manifest::serialize() const {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.put<uint32_t>(kManifestMagic);
  w.put<uint16_t>(kManifestVersion);
  w.put<uint32_t>(static_cast<uint32_t>(tensors_.size()));
  for (const auto& t : tensors_) {
    w.put_string(t.name);
    w.put<uint8_t>(static_cast<uint8_t>(t.dtype));
    w.put<uint8_t>(static_cast<uint8_t>(t.shape.size()));
    for (uint64_t dim : t.shape) w.put<uint64_t>(dim);
  }
  return out;
}

Result<Manifest> Manifest::parse(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0;
  uint16_t version = 0;
  uint32_t count = 0;
  DC_RETURN_IF_ERROR(r.get(&magic, "manifest magic"));
  if (magic != kManifestMagic) return corrupt("not a manifest (magic {:#x})", magic);
  DC_RETURN_IF_ERROR(r.get(&version, "manifest version"));
  if (version != kManifestVersion)
    return corrupt("manifest format version {} is not supported (want {})", version, kManifestVersion);
  DC_RETURN_IF_ERROR(r.get(&count, "manifest tensor count"));
  if (count > kMaxTensors) return corrupt("manifest claims {} tensors, the limit is {}", count, kMaxTensors);
  // Each tensor takes at least 6 bytes, so a forged count cannot make us reserve much.
  if (count > r.remaining() / 6)
    return corrupt("manifest claims {} tensors but has only {} bytes left", count, r.remaining());
  std::vector<TensorSpec> tensors(count);
  for (uint32_t i = 0; i < count; ++i) {
    TensorSpec& t = tensors[i];
    DC_RETURN_IF_ERROR(r.get_string(&t.name, kMaxNameBytes, "tensor name"));
    uint8_t dtype = 0;
    uint8_t rank = 0;
    DC_RETURN_IF_ERROR(r.get(&dtype, "tensor dtype"));
    if (!dtype_is_valid(dtype)) return corrupt("tensor {} has unknown dtype code {}", i, dtype);
    t.dtype = static_cast<DType>(dtype);
    DC_RETURN_IF_ERROR(r.get(&rank, "tensor rank"));
    if (rank > kMaxRank) return corrupt("tensor {} has rank {}, the limit is {}", i, rank, kMaxRank);
    t.shape.resize(rank);
    for (auto& dim : t.shape) DC_RETURN_IF_ERROR(r.get(&dim, "tensor shape"));
  }
  if (!r.at_end()) return corrupt("{} trailing bytes after the manifest", r.remaining());
  auto manifest = create(std::move(tensors));
  if (!manifest.ok()) return Status(StatusCode::kCorrupt, manifest.status().message());
  return manifest;
}

}  // namespace deltacast
