// Tensor shapes of a transformer-like model of a given total size, so that
// tests and benchmarks see realistic tensor counts and sizes (a few large
// matrices, many norm vectors) rather than one flat array.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout.h"
#include "core/manifest.h"

namespace deltacast {

// Returns tensors whose element counts add up to exactly `total_elements`:
// an embedding, L layers of attention (q, k, v, o: h x h), MLP (up: 4h x h,
// down: h x 4h) and two norms (h), a final norm, and an output head that
// takes the remainder. The hidden size grows with the model.
std::vector<TensorSpec> transformer_layout(uint64_t total_elements, DType dtype);

// A fine-grained mixture-of-experts model of the same total: half the hidden
// size of transformer_layout; per layer attention, a router (experts x h) and `experts`
// experts of three small matrices each (gate, up: i x h; down: h x i, with
// i = h / 16), so that tensors number in the thousands to tens of thousands,
// as in the MoE models whose per-tensor apply loops are slow. Small totals
// fall back to transformer_layout.
std::vector<TensorSpec> moe_layout(uint64_t total_elements, DType dtype, uint64_t experts = 128);

// What tensor-parallel rank `rank` of `world` holds of a transformer_layout model, as an inference
// engine lays it out: per layer a fused `attn.qkv_proj.weight` (its rows of q, then of k, then of
// v), `attn.o_proj.weight` (its columns of o), `mlp.up_proj.weight` (its rows of up),
// `mlp.down_proj.weight` (its columns of down); the embedding and the output head split by rows
// (vocabulary-parallel); norms and anything else whole on every rank. Dimensions split evenly,
// the last rank taking the remainder. Errors when `world` is 0, `rank` >= `world`, or a split
// dimension is smaller than `world`.
Result<std::vector<LocalTensorSpec>> tensor_parallel_views(const std::vector<TensorSpec>& model, uint32_t rank,
                                                           uint32_t world);

// What trainer rank `rank` of `world` owns of a transformer_layout model, as a tensor-parallel
// trainer with an FSDP-sharded embedding shards it: q, k, v, up and the output head by rows
// (column-parallel layers), o and down by columns (row-parallel layers), the embedding as a flat
// range of its elements cut unevenly and off row boundaries (FSDP flat shards), and every other
// tensor (norms, biases) whole on one rank, spread round-robin. Each local tensor keeps its
// logical name. The ranks' pieces tile the model exactly once. Errors as tensor_parallel_views.
Result<std::vector<LocalTensorSpec>> trainer_shards(const std::vector<TensorSpec>& model, uint32_t rank, uint32_t world);

}  // namespace deltacast
