#include "broadcast/engine/plan/wan_paths.h"

#include <set>
#include <utility>

namespace deltacast {

WanPaths wan_paths(const RateBook& book, const std::map<uint32_t, StripeChildren>& children_by_parent,
                   const std::function<std::string(uint32_t)>& site) {
  // The plan's links across sites, by the site they go into (a link once, whatever its stripes).
  std::map<std::string, std::set<std::pair<uint32_t, uint32_t>>> into;
  for (const auto& [parent, children] : children_by_parent) {
    const std::string from = site(parent);
    for (const auto& stripe : children) {
      for (uint32_t child : stripe) {
        std::string to = site(child);
        if (to != from) into[std::move(to)].insert({parent, child});
      }
    }
  }
  WanPaths paths;
  for (const auto& [to, links] : into) {
    const auto wan = book.wan_into(to, site);
    if (!wan) continue;
    const PathEstimate share{wan->bytes_per_second / static_cast<double>(links.size()), wan->round_trip};
    if (!share.known()) continue;
    for (const auto& [parent, child] : links) paths[parent][child] = share;
  }
  return paths;
}

const std::map<uint32_t, PathEstimate>& paths_from(const WanPaths& paths, uint32_t parent) {
  static const std::map<uint32_t, PathEstimate> kNone;
  const auto it = paths.find(parent);
  return it == paths.end() ? kNone : it->second;
}

}  // namespace deltacast
