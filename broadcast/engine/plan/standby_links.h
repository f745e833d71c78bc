// Standby links between sites. A site cut off goes on from another site (to_tails), but nothing
// in a plan says which other sites still reach it: the links it takes a version over run from the
// producer's site (trees) or the site before it (chains), so a detour through a site cut off too
// is found one detection later (a simulated site cut from all but one of three cost 1.4 s over
// its 0.38 s detour in trees). One member of each site (its sentinel) keeps a link to the sentinel
// of every site named after its own, sending nothing over it: the receiver's heartbeats say
// whether the two sites reach each other. A sentinel reports the sentinels it no longer hears
// (control::Unheard), and detours avoid those links as they avoid one a version was found unable
// to cross.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "broadcast/engine/plan/planner.h"

namespace deltacast {

// Per sentinel, the members it keeps a standby link to. A site's sentinel is its member of lowest
// id among `members` (sites as `sites` names them; unnamed: the producer's, whose sentinel is the
// producer, kProducerSender, where `members` has it); each watches the sentinel of every site
// whose name sorts after its own, so every two sites with members are watched once, from one end
// (a link's heartbeats cross both ways). One site: none.
std::map<uint32_t, std::vector<uint32_t>> standby_links(const std::vector<uint32_t>& members, const SiteOf& sites);

// The WAN links (both ways) between the sites of sentinels that do not hear each other: from the
// sentinels' reports (`unheard`: per reporter, the members it does not hear), counting only
// reports of links in `standby` (as standby_links made them). A site none of whose standby links
// is heard, of two or more, tells nothing: it is cut off from every other site, or its sentinel is
// (dead, or its NICs down), and no detour into it is told apart from another by that.
BrokenLinks unheard_links(const std::map<uint32_t, std::vector<uint32_t>>& unheard,
                          const std::map<uint32_t, std::vector<uint32_t>>& standby, const SiteOf& sites);

}  // namespace deltacast
