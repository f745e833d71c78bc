// Logical tensors and the pieces of them that sharded processes hold.
//
// A group shares one list of logical tensors (name, dtype, full shape). A
// trainer rank owns pieces of them: a range along one dimension (row- or
// column-parallel tensor shards) or a range of the row-major flattened tensor
// (FSDP flat shards). A rollout process holds tensors of its own that are
// views of logical ones: one piece, or several pieces concatenated along one
// dimension (a tensor-parallel rank's fused qkv_proj = its rows of q, k and
// v). Everything here reduces such declarations to runs: contiguous ranges of
// a logical tensor's flattened elements and where they sit in a local tensor,
// which is what ownership checks, routing by need and remapping on apply
// work with. Declarations come from users and over the network: every check
// returns an error naming the tensor, nothing here trusts a size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/manifest.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace deltacast {

// A range of one logical tensor: along dimension `dim` (elements [begin, end)
// of that dimension, every other dimension whole), or, with `flat`, elements
// [begin, end) of the row-major flattened tensor.
struct PieceSpec {
  std::string tensor;  // logical tensor name
  bool flat = false;
  uint32_t dim = 0;
  uint64_t begin = 0;
  uint64_t end = 0;

  friend bool operator==(const PieceSpec&, const PieceSpec&) = default;
};

// A local tensor made of pieces concatenated along `concat_dim` (one piece:
// the piece itself). Flat pieces are 1-D and concatenate end to end.
struct LocalTensorSpec {
  std::string name;
  std::vector<PieceSpec> pieces;
  uint32_t concat_dim = 0;

  friend bool operator==(const LocalTensorSpec&, const LocalTensorSpec&) = default;
};

// Logical elements [logical, logical + length) of logical tensor `tensor`
// are local elements [local, local + length) of local tensor `local_tensor`.
struct ElementRun {
  uint32_t tensor = 0;
  uint64_t logical = 0;
  uint64_t length = 0;
  uint32_t local_tensor = 0;
  uint64_t local = 0;

  friend bool operator==(const ElementRun&, const ElementRun&) = default;
};

// A process's local tensors resolved against the logical ones.
class Layout {
 public:
  // Checks every piece against `logical` (known name, dimension and range inside the shape, not
  // empty; the pieces of one local tensor share the dtype and the dimensions they are not
  // concatenated along) and resolves the local tensors' shapes and runs. Errors name the tensor.
  static Result<Layout> resolve(const std::vector<TensorSpec>& logical, std::vector<LocalTensorSpec> locals);

  // The local tensors with their shapes and dtypes (a manifest of what the process holds).
  const std::vector<TensorSpec>& local_specs() const { return local_specs_; }
  // How many logical tensors the layout was resolved (or composed) against.
  size_t logical_tensors() const { return first_run_.empty() ? 0 : first_run_.size() - 1; }
  // Every run, ordered by logical tensor, then logical offset.
  std::span<const ElementRun> runs() const { return runs_; }
  // The runs of logical tensor `tensor` that intersect logical elements [begin, end), clipped to
  // that range (what a chunk of those elements means to this process).
  std::vector<ElementRun> intersect(uint32_t tensor, uint64_t begin, uint64_t end) const;
  // Logical elements of tensor `tensor` this process holds (counted once per local copy).
  uint64_t held_elements(uint32_t tensor) const;

  // What a producer rank's tensors mean to a process holding `view`: a layout whose logical
  // tensors are `owner`'s local tensors (the pieces the rank encodes, in the rank's own
  // coordinates) and whose local tensors are `view`'s. Its runs say where each element of the
  // rank's tensors lands in the process (none: the process needs nothing from that rank), so a
  // version the rank encoded applies with apply_remapped, and routing keeps only the chunks that
  // intersect it. Both layouts must be resolved against the same logical tensors.
  static Result<Layout> compose(const Layout& owner, const Layout& view);

 private:
  // Sorts runs_ and builds the search index over `logical_tensors` logical tensors.
  void index(size_t logical_tensors);

  std::vector<TensorSpec> local_specs_;
  std::vector<ElementRun> runs_;
  std::vector<size_t> first_run_;  // per logical tensor, its first index in runs_ (and one past the last tensor)
  std::vector<uint64_t> reach_;    // per run, the furthest logical end of its tensor's runs up to it (binary search)
};

// Copies what `layout` holds of the logical tensors `logical` into its local tensors `locals`
// (host tensors matching layout.local_specs()), run by run; with `pool`, runs go in parallel (a
// local element is one logical element, so they write disjoint bytes).
void gather_views(const Layout& layout, std::span<const TensorView> logical, std::span<const TensorView> locals,
                  ThreadPool* pool = nullptr);

// Ownership across producers: every element of every logical tensor owned by exactly one of
// `owners` (one Layout per rank). A gap or an overlap is an error naming the tensor, the element
// and the ranks involved.
// `gaps_allowed`: only overlaps are errors (a group still forming, some ranks not in yet).
// `ranks`: the rank number of each owner, for the messages (default: its index).
Status check_tiling(const std::vector<TensorSpec>& logical, std::span<const Layout> owners, bool gaps_allowed = false,
                    std::span<const uint32_t> ranks = {});

}  // namespace deltacast
