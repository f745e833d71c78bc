// Standby links between sites. A site cut off goes on from another site (to_tails), but nothing
// in a plan says which other sites still reach it: the links it takes a version over run from the
// producer's site only, so a detour through a site cut off too is found one detection later (a
// simulated site cut from all but one of three cost 1.4 s over its 0.38 s detour in trees). One
// member of each site (its sentinel) keeps a link to the sentinel of every site named after its
// own, sending nothing over it: the receiver's heartbeats say whether the two sites reach each
// other. A sentinel reports the sentinels it no longer hears (control::Unheard), and a detour
// avoids those links as it avoids one a version was found unable to cross.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "broadcast/engine/plan/planner.h"

namespace deltacast {

// Per sentinel, the members it keeps a standby link to. A site's sentinel is its member of lowest
// id among `members` (sites as `sites` names them; unnamed: the producer's); each watches the
// sentinel of every site whose name sorts after its own, so every two sites with members are
// watched once, from one end (a link's heartbeats cross both ways). One site: none.
std::map<uint32_t, std::vector<uint32_t>> standby_links(const std::vector<uint32_t>& members, const SiteOf& sites);

// The WAN links (both ways) between each reporter's site and the sites of the members it reports
// unheard on its standby links (`unheard`: per reporter).
BrokenLinks unheard_links(const std::map<uint32_t, std::vector<uint32_t>>& unheard, const SiteOf& sites);

}  // namespace deltacast
