#include "broadcast/engine/planner.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace deltacast {

uint32_t Plan::child(uint32_t id, uint32_t stripe) const {
  const auto& chain = chains[stripe];
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (chain[i] == id) return chain[i + 1];
  }
  return 0;
}

std::vector<uint32_t> Plan::children(uint32_t id) const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < stripes(); ++s) out.push_back(child(id, s));
  return out;
}

std::vector<uint32_t> Plan::heads() const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < stripes(); ++s) out.push_back(head(s));
  return out;
}

uint32_t default_stripes(size_t consumers) { return static_cast<uint32_t>(std::clamp<size_t>(consumers, 1, 4)); }

Plan plan_chains(std::vector<uint32_t> members, uint32_t stripes, const std::vector<uint32_t>& slow) {
  Plan plan;
  if (members.empty() || stripes == 0) return plan;
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  std::vector<uint32_t> fast;
  for (uint32_t id : members) {
    if (std::find(slow.begin(), slow.end(), id) == slow.end()) fast.push_back(id);
  }
  for (uint32_t id : slow) {
    if (std::binary_search(members.begin(), members.end(), id)) plan.slow.push_back(id);
  }
  plan.chains.resize(stripes);
  for (uint32_t s = 0; s < stripes; ++s) {
    auto& chain = plan.chains[s];
    const size_t shift = fast.empty() ? 0 : (s * fast.size() / stripes) % fast.size();
    for (size_t i = 0; i < fast.size(); ++i) chain.push_back(fast[(i + shift) % fast.size()]);
    chain.insert(chain.end(), plan.slow.begin(), plan.slow.end());
  }
  return plan;
}

uint32_t alpha_beta_slice_bytes(uint64_t bytes, uint32_t hops, double alpha_seconds, double beta_bytes_per_second,
                                uint32_t min_bytes, uint32_t max_bytes) {
  if (bytes == 0) return min_bytes;
  const double pieces = std::sqrt(std::max<double>(1, hops - 1) * static_cast<double>(bytes) /
                                  std::max(1e-12, alpha_seconds * beta_bytes_per_second));
  const double size = static_cast<double>(bytes) / std::max(1.0, pieces);
  const uint64_t rounded = std::bit_floor(static_cast<uint64_t>(std::max(1.0, size)));
  return static_cast<uint32_t>(std::clamp<uint64_t>(rounded, min_bytes, max_bytes));
}

}  // namespace deltacast
