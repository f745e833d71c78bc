#include "sparse/trace/model_layout.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

namespace deltacast {

namespace {

uint64_t hidden_size_for(uint64_t total) {
  if (total >= (uint64_t{4} << 30)) return 4096;
  if (total >= (uint64_t{512} << 20)) return 2048;
  if (total >= (uint64_t{48} << 20)) return 1024;
  if (total >= (uint64_t{8} << 20)) return 512;
  if (total >= (uint64_t{256} << 10)) return 128;
  return 0;  // too small for layers: one flat tensor
}

// An embedding, as many layers of `per_layer` elements as fit (norms, attention, then what `mlp`
// adds under the layer's name prefix), a final norm and an LM head of the rest.
template <typename Mlp>
std::vector<TensorSpec> layered_model(uint64_t total, DType dtype, uint64_t h, uint64_t per_layer, Mlp&& mlp) {
  std::vector<TensorSpec> tensors;
  const uint64_t embed_rows = total / 16 / h;
  tensors.push_back({"embed.weight", dtype, {embed_rows, h}});
  uint64_t used = embed_rows * h + h;  // embedding + final norm
  const uint64_t layers = (total - used) / per_layer;
  for (uint64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    tensors.push_back({p + "input_norm.weight", dtype, {h}});
    for (const char* name : {"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight"}) {
      tensors.push_back({p + name, dtype, {h, h}});
    }
    tensors.push_back({p + "post_attn_norm.weight", dtype, {h}});
    mlp(tensors, p);
  }
  used += layers * per_layer;
  tensors.push_back({"final_norm.weight", dtype, {h}});
  const uint64_t rest = total - used;
  if (rest / h > 0) tensors.push_back({"lm_head.weight", dtype, {rest / h, h}});
  if (rest % h > 0) tensors.push_back({"lm_head.bias", dtype, {rest % h}});
  return tensors;
}

}  // namespace

std::vector<TensorSpec> transformer_layout(uint64_t total, DType dtype) {
  const uint64_t h = hidden_size_for(total);
  if (h == 0) return {{"weights", dtype, {total}}};
  return layered_model(total, dtype, h, 12 * h * h + 2 * h,
                       [&](std::vector<TensorSpec>& tensors, const std::string& p) {
                         tensors.push_back({p + "mlp.up.weight", dtype, {4 * h, h}});
                         tensors.push_back({p + "mlp.down.weight", dtype, {h, 4 * h}});
                       });
}

std::vector<TensorSpec> moe_layout(uint64_t total, DType dtype, uint64_t experts) {
  const uint64_t h = hidden_size_for(total) / 2;  // fine-grained MoE: a narrower model of the same size
  const uint64_t inner = h / 16;
  const uint64_t per_layer = 4 * h * h + 2 * h + experts * h + experts * 3 * inner * h;
  const uint64_t embed_rows = total / 16 / (h == 0 ? 1 : h);
  if (h == 0 || total < embed_rows * h + h + per_layer) return transformer_layout(total, dtype);
  return layered_model(total, dtype, h, per_layer, [&](std::vector<TensorSpec>& tensors, const std::string& p) {
    tensors.push_back({p + "mlp.router.weight", dtype, {experts, h}});
    for (uint64_t e = 0; e < experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      tensors.push_back({x + "gate.weight", dtype, {inner, h}});
      tensors.push_back({x + "up.weight", dtype, {inner, h}});
      tensors.push_back({x + "down.weight", dtype, {h, inner}});
    }
  });
}

Result<std::vector<LocalTensorSpec>> tensor_parallel_views(const std::vector<TensorSpec>& model, uint32_t rank,
                                                           uint32_t world) {
  if (world == 0 || rank >= world) return invalid_argument("tensor-parallel rank {} of {}", rank, world);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : model) by_name[t.name] = &t;
  // Rank `rank`'s share of dimension `dim` of `tensor`.
  const auto share = [&](const std::string& tensor, uint32_t dim) -> Result<PieceSpec> {
    const TensorSpec& t = *by_name.at(tensor);
    const uint64_t size = t.shape.at(dim);
    if (size < world) {
      return invalid_argument("'{}': dimension {} has {} entries, fewer than {} ranks", tensor, dim, size, world);
    }
    const uint64_t each = size / world;
    return PieceSpec{tensor, false, dim, rank * each, rank + 1 == world ? size : (rank + 1) * each};
  };
  const auto whole = [](const TensorSpec& t) {
    return t.shape.empty() ? PieceSpec{t.name, true, 0, 0, 1} : PieceSpec{t.name, false, 0, 0, t.shape[0]};
  };
  std::vector<LocalTensorSpec> views;
  std::set<std::string> used;
  for (const auto& t : model) {
    if (used.count(t.name) || t.numel() == 0) continue;  // an empty tensor holds nothing to view
    const auto dot = t.name.rfind("attn.q.weight");
    if (dot != std::string::npos && dot + 13 == t.name.size()) {
      const std::string layer = t.name.substr(0, dot);
      const std::string k = layer + "attn.k.weight", v = layer + "attn.v.weight";
      if (by_name.count(k) && by_name.count(v)) {
        LocalTensorSpec qkv{layer + "attn.qkv_proj.weight", {}, 0};
        for (const std::string& part : {t.name, k, v}) {
          DC_ASSIGN_OR_RETURN(PieceSpec piece, share(part, 0));
          qkv.pieces.push_back(piece);
          used.insert(part);
        }
        views.push_back(std::move(qkv));
        continue;
      }
    }
    const auto renamed = [&](const char* from, const char* to) -> std::optional<std::string> {
      const auto at = t.name.rfind(from);
      if (at == std::string::npos || at + std::strlen(from) != t.name.size()) return std::nullopt;
      return t.name.substr(0, at) + to;
    };
    std::optional<std::string> name;
    uint32_t dim = 0;
    if ((name = renamed("attn.o.weight", "attn.o_proj.weight"))) {
      dim = 1;
    } else if ((name = renamed("mlp.up.weight", "mlp.up_proj.weight"))) {
      dim = 0;
    } else if ((name = renamed("mlp.down.weight", "mlp.down_proj.weight"))) {
      dim = 1;
    } else if (t.name == "embed.weight" || t.name == "lm_head.weight") {
      name = t.name;
      dim = 0;
    }
    if (name && t.shape.size() == 2) {
      DC_ASSIGN_OR_RETURN(PieceSpec piece, share(t.name, dim));
      views.push_back({*name, {piece}, 0});
    } else {
      views.push_back({t.name, {whole(t)}, 0});
    }
    used.insert(t.name);
  }
  return views;
}

Result<std::vector<LocalTensorSpec>> trainer_shards(const std::vector<TensorSpec>& model, uint32_t rank,
                                                    uint32_t world) {
  if (world == 0 || rank >= world) return invalid_argument("trainer rank {} of {}", rank, world);
  const auto ends_with = [](const std::string& s, const char* tail) {
    const size_t n = std::strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
  };
  std::vector<LocalTensorSpec> pieces;
  uint64_t whole_tensors = 0;  // tensors kept whole so far: the next goes to rank (count mod world)
  for (const auto& t : model) {
    if (t.numel() == 0) continue;
    if (t.name == "embed.weight" || t.name == "weights") {
      // FSDP-style: rank r owns elements [cut(r), cut(r + 1)), cut at uneven fractions of the
      // elements (weights 1, 2, 1, 2, ...) and 7 elements past them: on no row boundary.
      const uint64_t n = t.numel();
      uint64_t total_weight = 0;
      for (uint32_t r = 0; r < world; ++r) total_weight += 1 + r % 2;
      if (n < 16 * total_weight) {
        return invalid_argument("'{}': {} elements are too few to cut into {} flat shards", t.name, n, world);
      }
      const auto cut = [&](uint32_t r) {
        if (r == 0 || r == world) return r == 0 ? uint64_t{0} : n;
        uint64_t w = 0;
        for (uint32_t k = 0; k < r; ++k) w += 1 + k % 2;
        return n / total_weight * w + 7;
      };
      pieces.push_back({t.name, {PieceSpec{t.name, true, 0, cut(rank), cut(rank + 1)}}, 0});
      continue;
    }
    int dim = -1;
    if (t.shape.size() == 2) {
      if (ends_with(t.name, "attn.o.weight") || ends_with(t.name, "mlp.down.weight")) {
        dim = 1;
      } else {
        dim = 0;
      }
    }
    if (dim >= 0) {
      const uint64_t size = t.shape[static_cast<size_t>(dim)];
      if (size < world) {
        return invalid_argument("'{}': dimension {} has {} entries, fewer than {} ranks", t.name, dim, size, world);
      }
      const uint64_t each = size / world;
      pieces.push_back({t.name,
                        {PieceSpec{t.name, false, static_cast<uint32_t>(dim), rank * each,
                                   rank + 1 == world ? size : (rank + 1) * each}},
                        0});
      continue;
    }
    if (whole_tensors++ % world != rank) continue;
    pieces.push_back(
        {t.name, {t.shape.empty() ? PieceSpec{t.name, true, 0, 0, 1} : PieceSpec{t.name, false, 0, 0, t.shape[0]}}, 0});
  }
  return pieces;
}

}  // namespace deltacast
