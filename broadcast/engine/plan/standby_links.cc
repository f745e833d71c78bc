#include "broadcast/engine/plan/standby_links.h"

#include <iterator>
#include <string>

namespace deltacast {

std::map<uint32_t, std::vector<uint32_t>> standby_links(const std::vector<uint32_t>& members, const SiteOf& sites) {
  std::map<std::string, uint32_t> sentinel;  // by site name, in order
  for (uint32_t id : members) {
    const auto [it, first] = sentinel.emplace(site_of(sites, id), id);
    if (!first && id < it->second) it->second = id;
  }
  std::map<uint32_t, std::vector<uint32_t>> links;
  for (auto from = sentinel.begin(); from != sentinel.end(); ++from) {
    for (auto to = std::next(from); to != sentinel.end(); ++to) links[from->second].push_back(to->second);
  }
  return links;
}

BrokenLinks unheard_links(const std::map<uint32_t, std::vector<uint32_t>>& unheard, const SiteOf& sites) {
  BrokenLinks links;
  for (const auto& [reporter, members] : unheard) {
    const std::string from = site_of(sites, reporter);
    for (uint32_t id : members) {
      const std::string to = site_of(sites, id);
      if (to == from) continue;
      links.insert({from, to});
      links.insert({to, from});
    }
  }
  return links;
}

}  // namespace deltacast
