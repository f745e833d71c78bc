#include "core/layout.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace deltacast {

namespace {

// More runs than this in one process's layout is a declaration gone wrong (or hostile), not a model.
constexpr uint64_t kMaxRuns = uint64_t{1} << 24;

uint64_t product(std::span<const uint64_t> dims) {
  uint64_t p = 1;
  for (uint64_t d : dims) p *= d;
  return p;
}

// Row-major strides of `shape`.
std::vector<uint64_t> strides_of(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> strides(shape.size(), 1);
  for (size_t j = shape.size(); j-- > 1;) strides[j - 1] = strides[j] * shape[j];
  return strides;
}

std::string describe(const PieceSpec& p) {
  return p.flat ? fmt::format("'{}' flat [{}, {})", p.tensor, p.begin, p.end)
                : fmt::format("'{}' dim {} [{}, {})", p.tensor, p.dim, p.begin, p.end);
}

// One piece, checked against its logical tensor: its shape.
Result<std::vector<uint64_t>> piece_shape(const std::string& local, size_t k, const PieceSpec& p, const TensorSpec& t) {
  if (p.begin >= p.end) {
    return invalid_argument("tensor '{}': piece {} ({}) is empty or reversed", local, k, describe(p));
  }
  if (p.flat) {
    if (p.end > t.numel()) {
      return invalid_argument("tensor '{}': piece {} ({}) runs past the {} elements of '{}'", local, k, describe(p),
                              t.numel(), t.name);
    }
    return std::vector<uint64_t>{p.end - p.begin};
  }
  if (p.dim >= t.shape.size()) {
    return invalid_argument("tensor '{}': piece {} ({}) names dimension {} of '{}', which has {}", local, k,
                            describe(p), p.dim, t.name, t.shape.size());
  }
  if (p.end > t.shape[p.dim]) {
    return invalid_argument("tensor '{}': piece {} ({}) runs past dimension {} of '{}' (size {})", local, k,
                            describe(p), p.dim, t.name, t.shape[p.dim]);
  }
  std::vector<uint64_t> shape = t.shape;
  shape[p.dim] = p.end - p.begin;
  return shape;
}

}  // namespace

Result<Layout> Layout::resolve(const std::vector<TensorSpec>& logical, std::vector<LocalTensorSpec> locals) {
  std::map<std::string, uint32_t> index;
  for (size_t i = 0; i < logical.size(); ++i) index.emplace(logical[i].name, static_cast<uint32_t>(i));
  Layout layout;
  std::map<std::string, size_t> local_names;
  for (size_t lt = 0; lt < locals.size(); ++lt) {
    const LocalTensorSpec& local = locals[lt];
    if (!local_names.emplace(local.name, lt).second) return invalid_argument("tensor '{}' is declared twice", local.name);
    if (local.pieces.empty()) return invalid_argument("tensor '{}' is made of no pieces", local.name);
    // Check every piece and find the local tensor's shape.
    std::vector<uint32_t> source(local.pieces.size());
    std::vector<std::vector<uint64_t>> shapes(local.pieces.size());
    for (size_t k = 0; k < local.pieces.size(); ++k) {
      const PieceSpec& p = local.pieces[k];
      auto it = index.find(p.tensor);
      if (it == index.end()) {
        return invalid_argument("tensor '{}': piece {} names '{}', which is not a logical tensor of the group",
                                local.name, k, p.tensor);
      }
      source[k] = it->second;
      const TensorSpec& t = logical[source[k]];
      DC_ASSIGN_OR_RETURN(shapes[k], piece_shape(local.name, k, p, t));
      if (t.dtype != logical[source[0]].dtype) {
        return invalid_argument("tensor '{}': its pieces have dtypes {} ('{}') and {} ('{}')", local.name,
                                dtype_name(logical[source[0]].dtype), logical[source[0]].name, dtype_name(t.dtype),
                                t.name);
      }
      if (p.flat != local.pieces[0].flat) {
        return invalid_argument("tensor '{}': flat pieces and dimension ranges cannot be concatenated", local.name);
      }
    }
    const uint32_t c = local.concat_dim;
    std::vector<uint64_t> shape = shapes[0];
    if (c >= shape.size()) {
      return invalid_argument("tensor '{}': concatenated along dimension {} of pieces with {}", local.name, c,
                              shape.size());
    }
    for (size_t k = 1; k < shapes.size(); ++k) {
      bool fits = shapes[k].size() == shape.size();
      for (size_t j = 0; fits && j < shape.size(); ++j) fits = j == c || shapes[k][j] == shape[j];
      if (!fits) {
        return invalid_argument("tensor '{}': piece {} has shape {}, which does not concatenate with shape {} "
                                "along dimension {}",
                                local.name, k, fmt::format("{}", shapes[k]), fmt::format("{}", shapes[0]), c);
      }
      shape[c] += shapes[k][c];
    }
    const auto local_tensor = static_cast<uint32_t>(lt);
    layout.local_specs_.push_back(TensorSpec{local.name, logical[source[0]].dtype, shape});
    // Runs: a piece's elements are contiguous in both the logical and the local tensor over the
    // dimensions from k = max(range dimension, concatenation dimension) on.
    const std::vector<uint64_t> local_strides = strides_of(shape);
    uint64_t concat_offset = 0;
    for (size_t k = 0; k < local.pieces.size(); ++k) {
      const PieceSpec& p = local.pieces[k];
      const TensorSpec& t = logical[source[k]];
      if (p.flat) {
        layout.runs_.push_back(ElementRun{source[k], p.begin, p.end - p.begin, local_tensor, concat_offset});
        concat_offset += p.end - p.begin;
        continue;
      }
      const std::vector<uint64_t>& ps = shapes[k];
      const std::vector<uint64_t> logical_strides = strides_of(t.shape);
      const size_t split = std::max<size_t>(p.dim, c);
      const uint64_t run_length = product(std::span(ps).subspan(split));
      const uint64_t count = product(std::span(ps).first(split));
      if (layout.runs_.size() + count > kMaxRuns) {
        return invalid_argument("tensor '{}': its pieces cut into more than {} runs", local.name, kMaxRuns);
      }
      // The piece's first element, in each tensor: only the range dimension is offset in the
      // logical one, only the concatenation dimension in the local one.
      const uint64_t logical_base = p.begin * logical_strides[p.dim];
      const uint64_t local_base = concat_offset * local_strides[c];
      std::vector<uint64_t> at(split, 0);  // odometer over the piece's dimensions before `split`
      for (uint64_t n = 0; n < count; ++n) {
        uint64_t lo = logical_base, lc = local_base;
        for (size_t j = 0; j < split; ++j) {
          lo += at[j] * logical_strides[j];
          lc += at[j] * local_strides[j];
        }
        layout.runs_.push_back(ElementRun{source[k], lo, run_length, local_tensor, lc});
        for (size_t j = split; j-- > 0;) {
          if (++at[j] < ps[j]) break;
          at[j] = 0;
        }
      }
      concat_offset += ps[c];
    }
  }
  layout.index(logical.size());
  return layout;
}

void Layout::index(size_t logical_tensors) {
  std::sort(runs_.begin(), runs_.end(), [](const ElementRun& a, const ElementRun& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.logical < b.logical;
  });
  first_run_.assign(logical_tensors + 1, runs_.size());
  for (size_t i = runs_.size(); i-- > 0;) first_run_[runs_[i].tensor] = i;
  for (size_t t = logical_tensors; t-- > 0;) first_run_[t] = std::min(first_run_[t], first_run_[t + 1]);
  reach_.resize(runs_.size());
  for (size_t i = 0; i < runs_.size(); ++i) {
    const ElementRun& r = runs_[i];
    const bool first_of_tensor = i == 0 || runs_[i - 1].tensor != r.tensor;
    reach_[i] = std::max(first_of_tensor ? 0 : reach_[i - 1], r.logical + r.length);
  }
}

Result<Layout> Layout::compose(const Layout& owner, const Layout& view) {
  if (owner.first_run_.size() != view.first_run_.size()) {
    return invalid_argument("the owner's layout covers {} logical tensors and the view's {}: not the same group",
                            owner.first_run_.size() - 1, view.first_run_.size() - 1);
  }
  Layout composed;
  composed.local_specs_ = view.local_specs_;
  // Each owner run is a stretch of one logical tensor that sits contiguously in an owner tensor;
  // the view's runs inside that stretch say where its elements go.
  for (const ElementRun& o : owner.runs_) {
    for (const ElementRun& v : view.intersect(o.tensor, o.logical, o.logical + o.length)) {
      ElementRun run{o.local_tensor, o.local + (v.logical - o.logical), v.length, v.local_tensor, v.local};
      // Runs that continue each other in both tensors are one (row shards seen by row views).
      ElementRun* last = composed.runs_.empty() ? nullptr : &composed.runs_.back();
      if (last != nullptr && last->tensor == run.tensor && last->local_tensor == run.local_tensor &&
          last->logical + last->length == run.logical && last->local + last->length == run.local) {
        last->length += run.length;
        continue;
      }
      if (composed.runs_.size() >= kMaxRuns) {
        return invalid_argument("the view's tensors and the owner's cut each other into more than {} runs", kMaxRuns);
      }
      composed.runs_.push_back(run);
    }
  }
  composed.index(owner.local_specs_.size());
  return composed;
}

std::vector<ElementRun> Layout::intersect(uint32_t tensor, uint64_t begin, uint64_t end) const {
  std::vector<ElementRun> out;
  if (tensor + 1 >= first_run_.size() || begin >= end) return out;
  // Runs of one local tensor never overlap in the logical tensor, but two local tensors may hold
  // the same elements (tied weights): the scan starts at the first run whose tensor's runs so far
  // reach past `begin` (reach_ only grows), and looks at every run starting before `end`.
  const auto reach_first = reach_.begin() + static_cast<std::ptrdiff_t>(first_run_[tensor]);
  const auto reach_last = reach_.begin() + static_cast<std::ptrdiff_t>(first_run_[tensor + 1]);
  const auto from_reach = std::upper_bound(reach_first, reach_last, begin);
  const auto first = runs_.begin() + (from_reach - reach_.begin());
  const auto last = runs_.begin() + static_cast<std::ptrdiff_t>(first_run_[tensor + 1]);
  for (auto it = first; it != last && it->logical < end; ++it) {
    const uint64_t from = std::max(begin, it->logical);
    const uint64_t to = std::min(end, it->logical + it->length);
    if (from >= to) continue;
    out.push_back(ElementRun{tensor, from, to - from, it->local_tensor, it->local + (from - it->logical)});
  }
  return out;
}

uint64_t Layout::held_elements(uint32_t tensor) const {
  uint64_t n = 0;
  if (tensor + 1 >= first_run_.size()) return 0;
  for (size_t i = first_run_[tensor]; i < first_run_[tensor + 1]; ++i) n += runs_[i].length;
  return n;
}

void gather_views(const Layout& layout, std::span<const TensorView> logical, std::span<const TensorView> locals,
                  ThreadPool* pool) {
  const auto runs = layout.runs();
  const auto copy = [&](size_t i) {
    const ElementRun& r = runs[i];
    const size_t size = dtype_size(locals[r.local_tensor].dtype);
    std::memcpy(locals[r.local_tensor].bytes() + r.local * size, logical[r.tensor].bytes() + r.logical * size,
                r.length * size);
  };
  if (pool != nullptr) {
    pool->parallel_for(runs.size(), copy);
  } else {
    for (size_t i = 0; i < runs.size(); ++i) copy(i);
  }
}

Status check_tiling(const std::vector<TensorSpec>& logical, std::span<const Layout> owners, bool gaps_allowed,
                    std::span<const uint32_t> ranks) {
  struct Owned {
    uint64_t begin, end;
    size_t rank;
  };
  std::vector<std::vector<Owned>> by_tensor(logical.size());
  for (size_t rank = 0; rank < owners.size(); ++rank) {
    for (const ElementRun& r : owners[rank].runs()) {
      const size_t named = rank < ranks.size() ? ranks[rank] : rank;
      if (r.tensor < by_tensor.size()) by_tensor[r.tensor].push_back(Owned{r.logical, r.logical + r.length, named});
    }
  }
  for (size_t t = 0; t < logical.size(); ++t) {
    auto& owned = by_tensor[t];
    std::sort(owned.begin(), owned.end(), [](const Owned& a, const Owned& b) { return a.begin < b.begin; });
    uint64_t covered = 0;
    size_t last_rank = 0;
    for (const Owned& o : owned) {
      if (o.begin > covered && !gaps_allowed) {
        return invalid_argument("logical tensor '{}': elements [{}, {}) are owned by no rank", logical[t].name, covered,
                                o.begin);
      }
      if (o.begin < covered) {
        return invalid_argument("logical tensor '{}': element {} is owned by rank {} and rank {}", logical[t].name,
                                o.begin, last_rank, o.rank);
      }
      covered = o.end;
      last_rank = o.rank;
    }
    if (covered < logical[t].numel() && !gaps_allowed) {
      return invalid_argument("logical tensor '{}': elements [{}, {}) are owned by no rank", logical[t].name, covered,
                              logical[t].numel());
    }
  }
  return Status();
}

}  // namespace deltacast
