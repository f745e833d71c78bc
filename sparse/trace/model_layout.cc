#include "sparse/trace/model_layout.h"

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

}  // namespace

std::vector<TensorSpec> transformer_layout(uint64_t total, DType dtype) {
  std::vector<TensorSpec> tensors;
  const uint64_t h = hidden_size_for(total);
  if (h == 0) {
    tensors.push_back({"weights", dtype, {total}});
    return tensors;
  }
  const uint64_t per_layer = 12 * h * h + 2 * h;
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
    tensors.push_back({p + "mlp.up.weight", dtype, {4 * h, h}});
    tensors.push_back({p + "mlp.down.weight", dtype, {h, 4 * h}});
  }
  used += layers * per_layer;
  tensors.push_back({"final_norm.weight", dtype, {h}});
  const uint64_t rest = total - used;
  if (rest / h > 0) tensors.push_back({"lm_head.weight", dtype, {rest / h, h}});
  if (rest % h > 0) tensors.push_back({"lm_head.bias", dtype, {rest % h}});
  return tensors;
}

std::vector<TensorSpec> moe_layout(uint64_t total, DType dtype, uint64_t experts) {
  const uint64_t h = hidden_size_for(total) / 2;  // fine-grained MoE: a narrower model of the same size
  const uint64_t inner = h / 16;
  const uint64_t per_layer = 4 * h * h + 2 * h + experts * h + experts * 3 * inner * h;
  const uint64_t embed_rows = total / 16 / (h == 0 ? 1 : h);
  if (h == 0 || total < embed_rows * h + h + per_layer) return transformer_layout(total, dtype);
  std::vector<TensorSpec> tensors;
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
    tensors.push_back({p + "mlp.router.weight", dtype, {experts, h}});
    for (uint64_t e = 0; e < experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      tensors.push_back({x + "gate.weight", dtype, {inner, h}});
      tensors.push_back({x + "up.weight", dtype, {inner, h}});
      tensors.push_back({x + "down.weight", dtype, {h, inner}});
    }
  }
  used += layers * per_layer;
  tensors.push_back({"final_norm.weight", dtype, {h}});
  const uint64_t rest = total - used;
  if (rest / h > 0) tensors.push_back({"lm_head.weight", dtype, {rest / h, h}});
  if (rest % h > 0) tensors.push_back({"lm_head.bias", dtype, {rest % h}});
  return tensors;
}

}  // namespace deltacast
