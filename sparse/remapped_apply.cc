#include "sparse/remapped_apply.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "sparse/chunk_decoder.h"

namespace deltacast {

Status apply_remapped(const VersionChunks& version, const Manifest& logical, const Layout& layout,
                      std::span<const TensorView> locals, ThreadPool& pool) {
  if (version.manifest_hash != logical.hash()) return mismatch("the version was verified for another manifest");
  const auto& specs = layout.local_specs();
  if (locals.size() != specs.size()) {
    return invalid_argument("{} local tensors given, the layout has {}", locals.size(), specs.size());
  }
  for (size_t i = 0; i < locals.size(); ++i) {
    if (!locals[i].device.is_cpu()) return invalid_argument("tensor '{}': the remapping applier needs host tensors", specs[i].name);
    if (locals[i].dtype != specs[i].dtype || locals[i].numel != specs[i].numel()) {
      return invalid_argument("tensor '{}': {} elements of {}, the layout says {} of {}", specs[i].name, locals[i].numel,
                              dtype_name(locals[i].dtype), specs[i].numel(), dtype_name(specs[i].dtype));
    }
  }
  // Chunks cover disjoint logical ranges and a local element is one logical element, so chunks
  // write disjoint local bytes: they go in parallel.
  return parallel_for_status(pool, version.chunks.size(), [&](size_t i) -> Status {
    const ChunkBody& c = version.chunks[i];
    const uint32_t tensor = c.header.tensor_index;
    if (tensor >= logical.size()) return corrupt("chunk {} names tensor {} of {}", i, tensor, logical.size());
    const uint64_t start = c.header.element_start;
    const uint64_t count = c.header.element_count;
    const std::vector<ElementRun> runs = layout.intersect(tensor, start, start + count);
    if (runs.empty()) return Status();
    const DType dtype = logical[tensor].dtype;
    const size_t size = dtype_size(dtype);
    std::vector<uint8_t> window(count * size, 0);
    for (const ElementRun& r : runs) {
      std::memcpy(window.data() + (r.logical - start) * size, locals[r.local_tensor].bytes() + r.local * size,
                  r.length * size);
    }
    ChunkHeader rebased = c.header;
    rebased.element_start = 0;
    DC_RETURN_IF_ERROR(apply_chunk_body(rebased, c.raw_body, TensorView{window.data(), dtype, count, Device{}})
                           .with_context(fmt::format("chunk {} (tensor '{}')", i, logical[tensor].name)));
    for (const ElementRun& r : runs) {
      std::memcpy(locals[r.local_tensor].bytes() + r.local * size, window.data() + (r.logical - start) * size,
                  r.length * size);
    }
    return Status();
  });
}

}  // namespace deltacast
