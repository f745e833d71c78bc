#include "broadcast/engine/plan/standby_links.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>
#include <utility>

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

BrokenLinks unheard_links(const std::map<uint32_t, std::vector<uint32_t>>& unheard,
                          const std::map<uint32_t, std::vector<uint32_t>>& standby, const SiteOf& sites) {
  using SitePair = std::pair<std::string, std::string>;  // in name order
  const auto pair_of = [&](uint32_t a, uint32_t b) {
    std::string x = site_of(sites, a), y = site_of(sites, b);
    return x < y ? SitePair{std::move(x), std::move(y)} : SitePair{std::move(y), std::move(x)};
  };
  std::set<SitePair> watched, silent;
  for (const auto& [watcher, peers] : standby) {
    for (uint32_t peer : peers) {
      watched.insert(pair_of(watcher, peer));
      const auto report = unheard.find(watcher);
      if (report != unheard.end() && std::count(report->second.begin(), report->second.end(), peer) > 0) {
        silent.insert(pair_of(watcher, peer));
      }
    }
  }
  // Per site, its standby links and those of them silent.
  std::map<std::string, std::pair<int, int>> counts;
  for (const SitePair& p : watched) {
    for (const std::string* site : {&p.first, &p.second}) {
      ++counts[*site].first;
      if (silent.count(p)) ++counts[*site].second;
    }
  }
  BrokenLinks links;
  for (const SitePair& p : silent) {
    const auto told_apart = [&](const std::string& site) {
      const auto& [all, unheard_of] = counts[site];
      return all < 2 || unheard_of < all;
    };
    if (!told_apart(p.first) || !told_apart(p.second)) continue;
    links.insert({p.first, p.second});
    links.insert({p.second, p.first});
  }
  return links;
}

}  // namespace deltacast
