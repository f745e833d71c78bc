#include "broadcast/engine/round.h"

#include <algorithm>
#include <set>

#include "broadcast/engine/plan/standby_links.h"
#include "broadcast/engine/plan/wan_paths.h"
#include "core/log.h"

#include <fmt/ranges.h>

namespace deltacast {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where the round stands, read from the member table.
struct RoundLook {
  std::set<uint32_t> committed, failed, gone, staged;
  // Members reported unreachable in this transfer, each with who reported it (0: the producer),
  // and those only reported heard on no rail for a little while (control::Unreachable::early).
  std::map<uint32_t, std::set<uint32_t>> unreachable, unheard;
  std::set<uint32_t> cut_off;  // reported unreachable on the standby links' word (act_on_standby_links)
  std::map<uint32_t, std::string> have;
  uint64_t progress = 0;  // grows with every slice, staging and commit anywhere

  std::set<uint32_t> done;  // committed, or staged by a member that commits when told to
  bool finished(size_t targets) const { return done.size() + failed.size() + gone.size() >= targets; }
};

RoundLook look_at(const std::map<uint32_t, MemberRecord>& all, const std::vector<uint32_t>& targets, uint64_t version,
                  uint64_t transfer) {
  RoundLook look;
  for (uint32_t id : targets) {
    auto it = all.find(id);
    if (it == all.end()) {
      look.gone.insert(id);
      continue;
    }
    const MemberRecord& r = it->second;
    if (r.transfer == transfer) {
      look.progress += r.arrived;
      look.have[id] = r.have;
    }
    if (r.unreachable_transfer == transfer) {
      for (uint32_t child : r.unreachable) look.unreachable[child].insert(id);
      for (uint32_t child : r.unheard_children) look.unheard[child].insert(id);
    }
    if (r.committed >= version) {
      look.committed.insert(id);
      look.staged.insert(id);
      look.done.insert(id);
      look.progress += 2;
    } else if (r.failed_version == version) {
      look.failed.insert(id);
    } else if (r.base >= version) {
      look.staged.insert(id);
      if (r.defers_commit) look.done.insert(id);
      look.progress += 1;
    }
  }
  return look;
}

// Where a target stood when its round gave up on it.
std::string where_it_stood(const MemberRecord* m, const RoundLook& look, uint32_t id, uint64_t transfer) {
  if (look.staged.count(id)) return "it staged the version and did not commit it";
  if (m != nullptr && m->transfer == transfer && m->arrived > 0) {
    return fmt::format("it had received {} slices of the version", m->arrived);
  }
  return "nothing of the version had reached it";
}

// The plan's members and the producer (kProducerSender), its site's sentinel (standby_links.h).
std::vector<uint32_t> with_producer(std::vector<uint32_t> members) {
  members.push_back(kProducerSender);
  return members;
}

// `id`'s standby links (standby_links over the plan's members) with where each peer takes data.
std::map<uint32_t, PeerEndpoints> watched_by(const std::map<uint32_t, std::vector<uint32_t>>& standby, uint32_t id,
                                             const std::map<uint32_t, PeerEndpoints>& directory) {
  std::map<uint32_t, PeerEndpoints> out;
  const auto it = standby.find(id);
  if (it == standby.end()) return out;
  for (uint32_t peer : it->second) {
    const auto at = directory.find(peer);
    if (at != directory.end()) out[peer] = at->second;
  }
  return out;
}

}  // namespace

RoundResult RoundDriver::run(const RoundSpec& spec, const std::function<bool()>& stop) {
  RoundResult result;
  const auto start = Clock::now();

  // Members still here and their data endpoints.
  std::vector<uint32_t> in_plan;
  std::map<uint32_t, PeerEndpoints> directory;
  std::map<uint32_t, std::string> names;  // the targets', for what the result says of them
  NodeOf nodes;  // members of one node take each stripe from one another, not over the node's rails again
  SiteOf sites;  // and members of one site, not over its WAN link again
  for (const MemberRecord& m : membership_.snapshot()) {
    if (std::find(spec.targets.begin(), spec.targets.end(), m.id) == spec.targets.end()) continue;
    in_plan.push_back(m.id);
    directory[m.id] = m.rails;
    names[m.id] = m.name;
    if (!m.node.empty()) nodes[m.id] = m.node;
    if (m.away_from(options_.site)) sites[m.id] = m.site;
  }
  const std::vector<uint32_t> targets = in_plan;
  for (uint32_t id : spec.targets) {
    if (std::find(targets.begin(), targets.end(), id) == targets.end()) {
      result.lost.push_back(id);
      result.why_not[fmt::format("#{}", id)] = "left the group before the round started";
    }
  }
  if (targets.empty()) return result;

  const SlowVerdict verdict = rates_.judge(targets);
  // Without a healthy rate, the default (the NICs' speed where the producer is told it), or what
  // the few members measured took where that is more: it is a lower bound, however biased.
  const double rate = verdict.healthy > 0 ? verdict.healthy : std::max(options_.default_rate, verdict.partial);
  size_t rails = SIZE_MAX;  // the fewest any target takes data over
  for (uint32_t id : targets) rails = std::min(rails, std::max<size_t>(1, directory[id].size()));
  // The plan's network hops: one per node (a member without a node name is a node of its own).
  std::set<std::string> hosts;
  for (uint32_t id : targets) {
    const auto it = nodes.find(id);
    hosts.insert(it != nodes.end() ? it->second : fmt::format("#{}", id));
  }
  // The WAN: the sites with targets (the producer's counted), and a hop's latency as the last
  // round's links across sites measured it (half the longest base round trip; 0 before any).
  std::set<std::string> site_names;  // the sites other than the producer's
  for (const auto& [id, site] : sites) site_names.insert(site);
  const auto site = [&](uint32_t id) { return site_of(sites, id); };  // kProducerSender: the producer's
  const WanPath wan{static_cast<uint32_t>(site_names.size() + 1),
                    rates_.longest_round_trip([&](uint32_t sender, uint32_t child) {
                      return site(sender) != site(child);
                    }) / 2};
  const VersionShape planned =
      version_shape(spec.bytes, targets.size(), static_cast<uint32_t>(hosts.size()), rate, static_cast<uint32_t>(rails),
                    options_.alpha_seconds, options_.stripes, options_.slice_bytes,
                    verdict.healthy > 0 ? verdict.slice_bytes : 0, options_.fanout, wan);
  const uint32_t slice_bytes = planned.slice_bytes;
  const uint32_t stripes = planned.stripes;
  const TransferShape shape{spec.transfer, spec.bytes, slice_bytes};
  Plan plan = plan_trees(in_plan, stripes, planned.fanout, verdict.slow, nodes, sites);
  // A WAN link that failed in a recent round: its site takes this version through another.
  std::vector<uint32_t> routed_around;
  plan = around_broken_links(plan, sites, links_to_avoid(options_.unheard_to_plan), &routed_around);
  if (!routed_around.empty()) {
    log().info("version {}: consumers {} take it through another site (a WAN link into theirs failed lately)",
               spec.version, fmt::join(routed_around, ","));
  }
  rates_.adopt(targets, verdict);
  result.first_plan = plan;
  log().debug("version {}: {} stripes of {}-byte slices, fan-out {} (modelled {:.2f} ms, bound {:.2f} ms; {} sites, "
              "{:.1f} ms a WAN hop); order {}; healthy {:.0f} MB/s; slow {}",
              spec.version, stripes, slice_bytes, planned.fanout, planned.seconds * 1e3, planned.bound_seconds * 1e3,
              wan.sites, wan.one_way_seconds * 1e3, fmt::format("{}", plan.order), verdict.healthy / 1e6,
              fmt::format("{}", plan.slow));
  result.slice_bytes = slice_bytes;
  result.stripes = stripes;
  result.fanout = planned.fanout;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    in_flight_ = InFlight{spec.version, spec.transfer, spec.full, spec.bytes, slice_bytes, targets, start};
    std::sort(in_flight_->targets.begin(), in_flight_->targets.end());  // progress() looks members up in it
  }
  // The round is no longer in flight however it ends.
  const std::unique_ptr<RoundDriver, void (*)(RoundDriver*)> clear_in_flight(this, [](RoundDriver* d) {
    std::lock_guard<std::mutex> lock(d->in_flight_mu_);
    d->in_flight_.reset();
  });

  membership_.update([&](std::map<uint32_t, MemberRecord>& all) {
    for (uint32_t id : targets) {
      auto it = all.find(id);
      if (it == all.end()) continue;
      it->second.transfer = spec.transfer;
      it->second.arrived = 0;
      it->second.have.clear();
      it->second.failed_version = 0;
    }
  });
  // Every hop verifies each slice against these as it lands, and each consumer checks the digest
  // from them, so no one hashes the bytes again. They come from the leaf digests taken while the
  // version's bytes were made (no pass over them here) when slices start on leaves.
  const std::vector<uint64_t> checksums = slice_checksums(spec.data, shape, spec.leaves, hash_pool_);
  control::Announce announce{spec.version, spec.base, spec.full, spec.transfer, spec.bytes, slice_bytes,
                             transfer_digest(checksums, spec.bytes), {}, spec.image};
  // The WAN paths into the children across sites, per parent (the producer's own under kProducerSender).
  const auto paths_for = [&](const std::vector<uint32_t>& members) {
    std::map<uint32_t, StripeChildren> children{{kProducerSender, plan.heads()}};
    for (uint32_t id : members) children[id] = plan.children(id);
    return wan_paths(rates_, children, site);
  };
  auto paths = paths_for(targets);
  auto standby = standby_links(with_producer(targets), sites);
  // `id`'s part of the plan: its children, the WAN paths into them and its standby links.
  const auto part_of_plan = [&](uint32_t id) {
    control::Forwarding part = control::forwarding_of(plan, id, directory, paths_from(paths, id));
    part.watch = watched_by(standby, id, directory);
    return part;
  };
  // The producer's own part: the stripes' heads (each holding `have`) and its site's standby links.
  const auto follow_plan = [&](const std::map<uint32_t, std::vector<bool>>& have) {
    if (Status s = relay_.set_children(plan.heads(), directory, have, paths_from(paths, kProducerSender)); !s.ok()) {
      log().error("round for version {}: {}", spec.version, s.to_string());
    }
    if (Status s = relay_.watch(watched_by(standby, kProducerSender, directory)); !s.ok()) {
      log().warn("round for version {}: standby links: {}", spec.version, s.to_string());
    }
  };
  for (uint32_t id : targets) {
    announce.forwarding = part_of_plan(id);
    membership_.send(id, announce);
  }
  relay_.begin(shape, spec.data, stripes, &checksums, spec.leaf_tags);
  follow_plan({});

  const Millis timeout = options_.timeout.count() != 0
                             ? options_.timeout
                             : Millis(30000 + static_cast<int64_t>(spec.bytes / 10000));  // 10 MB/s
  auto last_progress_at = Clock::now();
  uint64_t last_progress = 0;
  bool all_staged = false;
  RoundLook look;
  // A report counts if it came from a member that feeds `id` now: one made against the plan
  // before (its site moved since, say) is stale. And once: a member reports a child once per
  // transfer, so a move that brought the child back below the same reporter (few sites to go
  // round) must not be undone by that old report again (it was, several times in a millisecond).
  std::set<std::pair<uint32_t, uint32_t>> acted_on;  // (child, reporter)
  // `id`'s parents in the plan now, in the stripes it is in, that no report of it was acted on from.
  const auto parents_not_acted_on = [&](uint32_t id) {
    std::set<uint32_t> out;
    for (uint32_t s = 0; s < plan.stripes(); ++s) {
      const auto& order = plan.order[s];
      const uint32_t parent = plan.parent(id, s);
      if (std::find(order.begin(), order.end(), id) != order.end() && !acted_on.count({id, parent})) {
        out.insert(parent);
      }
    }
    return out;
  };
  const auto current_reporters = [&](uint32_t id, const std::set<uint32_t>& reporters) {
    std::set<uint32_t> out;
    for (uint32_t parent : parents_not_acted_on(id)) {
      if (reporters.count(parent)) out.insert(parent);
    }
    return out;
  };
  const auto fresh = [&](uint32_t id, const std::set<uint32_t>& reporters) {
    return !current_reporters(id, reporters).empty();
  };
  // A member moves once (one that hung would go round the tails); one its parent in another site
  // cannot reach moves again while there are sites to try (its site's links to more than one
  // site failed: the planner hangs it below a third each time).
  std::map<uint32_t, size_t> moves;
  const auto to_move = [&](uint32_t id) {
    const auto it = look.unreachable.find(id);
    if (it == look.unreachable.end() || !fresh(id, it->second)) return false;
    const size_t times = moves.count(id) ? moves.at(id) : 0;
    return times == 0 || (fed_across_sites(plan, id, sites) && times <= site_names.size());
  };
  // What the standby links say (links_to_avoid) turns suspicions into moves, as it comes in:
  // - A child its parent in another site has heard on no rail for a little while (an early
  //   report) is as good as reported unreachable where the link between the two sites is cut:
  //   two observations over different connections (the data path's, and the sentinels' idle
  //   ones, one of them from a third site that still hears the child's). It moves some 150 ms
  //   before the full report would move it.
  // - A member of a site moved in this round whose parent's site is found cut from its own moves
  //   on at once: the sentinels find a cut within a heartbeat of each other and their reports
  //   come in from near and far, so a detour chosen on the first of them may lead into a site
  //   cut off too; its data path would take as long again to say so. (Waiting for the reports to
  //   settle costs more: simulated, 50 ms more of a cut into trees, against a second re-plan
  //   that costs nothing measurable.)
  // Returns whether an early report still waits for the standby links.
  const auto act_on_standby_links = [&] {
    std::vector<std::pair<uint32_t, uint32_t>> across;  // (child, parent)
    for (const auto& [id, reporters] : look.unheard) {
      for (uint32_t parent : current_reporters(id, reporters)) {
        if (site_of(sites, parent) != site_of(sites, id)) across.emplace_back(id, parent);
      }
    }
    std::set<std::string> moved_sites;  // a move takes the rest of the site along (to_tails)
    for (const auto& [id, times] : moves) moved_sites.insert(site_of(sites, id));
    std::vector<std::pair<uint32_t, uint32_t>> moved;  // (member, its parent now in another site)
    for (uint32_t id : in_plan) {
      if (!moved_sites.count(site_of(sites, id))) continue;
      for (uint32_t parent : parents_not_acted_on(id)) {
        if (site_of(sites, parent) != site_of(sites, id)) moved.emplace_back(id, parent);
      }
    }
    if (across.empty() && moved.empty()) return false;
    const BrokenLinks cut = links_to_avoid(Millis(0));
    const auto is_cut = [&](uint32_t id, uint32_t parent) {
      return cut.count({site_of(sites, parent), site_of(sites, id)}) != 0;
    };
    bool pending = false;
    for (const auto& [id, parent] : across) pending |= !is_cut(id, parent);
    moved.insert(moved.end(), across.begin(), across.end());
    for (const auto& [id, parent] : moved) {
      if (!is_cut(id, parent)) continue;
      look.unreachable[id].insert(parent);
      look.cut_off.insert(id);
    }
    return pending;
  };
  bool unheard_pending = false;  // a child reported early, not moved yet
  for (;;) {
    // Sooner while an early report waits for the standby links, or a member moved in this round
    // may have to move on when they report (act_on_standby_links below).
    const Millis look_again = unheard_pending || !moves.empty() ? Millis(25) : Millis(100);
    membership_.wait(look_again, [&](const std::map<uint32_t, MemberRecord>& all) {
      look = look_at(all, targets, spec.version, spec.transfer);
      const bool broken = std::any_of(in_plan.begin(), in_plan.end(), [&](uint32_t id) {
        return look.gone.count(id) != 0 || look.failed.count(id) != 0 || to_move(id);
      });
      return look.finished(targets.size()) || broken || look.progress != last_progress;
    });
    const double elapsed = since(start);
    for (uint32_t id : look.staged) result.staged_at.try_emplace(id, elapsed);
    if (!all_staged && look.staged.size() + look.failed.size() + look.gone.size() >= targets.size()) {
      all_staged = true;
      result.staged_seconds = elapsed;
    }
    if (look.progress != last_progress) {
      last_progress = look.progress;
      last_progress_at = Clock::now();
    }
    if (look.finished(targets.size())) break;
    const bool stalled = Clock::now() - last_progress_at > options_.stall_timeout;
    if (stop() || stalled || Clock::now() - start > timeout) {
      const char* ended = stop() ? "stopped" : stalled ? "stalled" : "timed out";
      std::map<uint32_t, MemberRecord> records;
      for (MemberRecord& m : membership_.snapshot()) records.emplace(m.id, std::move(m));
      std::vector<std::string> unfinished;
      for (uint32_t id : targets) {
        if (look.done.count(id) || look.gone.count(id) || look.failed.count(id)) continue;
        look.failed.insert(id);
        const auto it = records.find(id);
        const std::string stood = where_it_stood(it != records.end() ? &it->second : nullptr, look, id, spec.transfer);
        unfinished.push_back(fmt::format("'{}' ({})", names[id], stood));
        result.why_not[names[id]] = fmt::format("round {}: {}", ended, stood);
      }
      log().error("version {}: round {} with {} of {} members done; not done: {}", spec.version, ended,
                  look.committed.size(), targets.size(), fmt::join(unfinished, "; "));
      break;
    }
    // A member of the plan died or failed: re-parent its children. A member that went silent
    // to its parent (reported by that parent, or found by the producer's own sprayers to the
    // heads): to the tails, where it delays nobody, before its control link times out (a hung
    // host keeps its connections open).
    std::vector<uint32_t> dropped, unreachable;
    for (uint32_t id : in_plan) {
      if (look.gone.count(id) || look.failed.count(id)) dropped.push_back(id);
    }
    for (uint32_t id : relay_.unreachable_children()) look.unreachable[id].insert(0);  // the producer's own
    for (uint32_t id : relay_.unheard_children()) look.unheard[id].insert(0);
    unheard_pending = act_on_standby_links();
    for (const auto& [id, reporters] : look.unreachable) {
      const bool in_the_plan = std::find(in_plan.begin(), in_plan.end(), id) != in_plan.end();
      if (in_the_plan && std::find(dropped.begin(), dropped.end(), id) == dropped.end() && to_move(id)) {
        ++moves[id];
        unreachable.push_back(id);
        for (uint32_t reporter : current_reporters(id, reporters)) acted_on.insert({id, reporter});
      }
    }
    if (dropped.empty() && unreachable.empty()) continue;
    std::erase_if(in_plan, [&](uint32_t id) { return std::find(dropped.begin(), dropped.end(), id) != dropped.end(); });
    for (uint32_t id : dropped) {
      directory.erase(id);
      relay_.forget_peer(id);
    }
    if (in_plan.empty()) continue;
    plan = without_members(plan, dropped, nodes, sites);  // the pipelines go on where they are
    if (!unreachable.empty()) {
      // The rest of a site moved with them (its link may have failed) may move again: when its
      // new parent cannot reach it either (a report from that parent, fresh above).
      // A parent in another site that cannot reach its child: the link between their sites may
      // have failed; the detour avoids it, and so do the next rounds' plans for a while.
      for (uint32_t id : unreachable) {
        for (uint32_t s = 0; s < plan.stripes(); ++s) {
          const uint32_t parent = plan.parent(id, s);
          const bool in_stripe = std::find(plan.order[s].begin(), plan.order[s].end(), id) != plan.order[s].end();
          if (in_stripe && look.unreachable[id].count(parent) && site_of(sites, parent) != site_of(sites, id)) {
            note_broken_link(site_of(sites, parent), site_of(sites, id));
          }
        }
      }
      std::vector<uint32_t> everyone_moved;
      plan = to_tails(plan, unreachable, sites, &everyone_moved, links_to_avoid(Millis(0)));
      std::vector<std::string> reported;
      bool on_standby_word = false;
      for (uint32_t id : unreachable) {
        const bool cut_off = look.cut_off.count(id) != 0;
        on_standby_word |= cut_off;
        reported.push_back(fmt::format("{} (by {}{})", id, fmt::join(look.unreachable[id], ","),
                                       cut_off ? "; the standby links say the link into its site is cut" : ""));
      }
      if (on_standby_word) ++result.standby_replans;
      log().warn("version {}: consumers {} went silent to their parents; moved to the tails{}", spec.version,
                 fmt::join(reported, ", "),
                 everyone_moved.size() > unreachable.size()
                     ? fmt::format(" with their sites (the links into them failed: {} moved)", fmt::join(everyone_moved, ","))
                     : std::string());
    }
    ++result.replans;
    std::map<uint32_t, std::vector<bool>> have;
    for (const auto& [id, hex] : look.have) {
      if (!directory.count(id) || hex.empty()) continue;
      auto bits = control::decode_bitmap(hex, shape.slices());
      if (bits.ok()) have[id] = *bits;
    }
    if (!dropped.empty()) {
      log().warn("version {}: consumers {} dropped out; re-planned {} stripes over {} consumers", spec.version,
                 fmt::join(dropped, ","), stripes, in_plan.size());
    }
    // Each member its new part of the plan and what its children hold (only those whose
    // children changed need it; the rest are told the same again, which changes nothing).
    paths = paths_for(in_plan);
    standby = standby_links(with_producer(in_plan), sites);  // a sentinel that died has a successor
    for (uint32_t id : in_plan) {
      control::Replan replan{spec.transfer, part_of_plan(id), {}};
      for (const auto& stripe : replan.forwarding.children) {
        for (uint32_t child : stripe) {
          const auto hex = look.have.find(child);
          if (hex != look.have.end() && have.count(child)) replan.have[child] = hex->second;
        }
      }
      membership_.send(id, replan);
    }
    // The producer's own reports are made live: a member that is a head again (its parents
    // dropped, or no other site left to feed it) may be reported by it anew.
    for (const auto& heads : plan.heads()) {
      for (uint32_t id : heads) acted_on.erase({id, 0});
    }
    follow_plan(have);
  }

  // The producer's own links into the stripes' heads go to the rate book with everyone else's.
  for (const auto& [child, sample] : relay_.child_links()) rates_.record(kProducerSender, child, sample, spec.version);
  rates_.close_round(slice_bytes);
  if (log().should_log(spdlog::level::debug)) {
    for (uint32_t id : targets) {
      if (const auto r = rates_.rates(id)) {
        log().debug("version {}: member {} inbound {:.0f} MB/s, capacity {:.0f} MB/s from {}, slow {}", spec.version,
                    id, r->inbound / 1e6, r->capacity / 1e6, r->capacity_from, r->slow);
      }
    }
  }
  relay_.end();
  const control::Done done{spec.version};
  for (uint32_t id : targets) {
    if (!look.gone.count(id)) membership_.send(id, done);
  }
  result.seconds = since(start);
  if (!all_staged) result.staged_seconds = result.seconds;
  membership_.update([&](std::map<uint32_t, MemberRecord>& all) {
    for (uint32_t id : look.committed) {
      auto it = all.find(id);
      if (it != all.end()) result.max_apply_seconds = std::max(result.max_apply_seconds, it->second.apply_seconds);
    }
  });
  result.committed.assign(look.committed.begin(), look.committed.end());
  result.failed.assign(look.failed.begin(), look.failed.end());
  for (uint32_t id : look.gone) {
    result.lost.push_back(id);
    result.why_not[names[id]] = "left the group during the round";
  }
  for (const MemberRecord& m : membership_.snapshot()) {  // failures the members reported themselves
    if (look.failed.count(m.id) && !result.why_not.count(m.name) && m.failed_version == spec.version) {
      result.why_not[m.name] = m.last_failure.to_string();
    }
  }
  return result;
}

BrokenLinks RoundDriver::recent_broken_links() {
  std::lock_guard<std::mutex> lock(broken_mu_);
  const auto now = Clock::now();
  std::erase_if(broken_links_, [&](const auto& link) { return now - link.second > options_.broken_link_memory; });
  BrokenLinks out;
  for (const auto& [link, when] : broken_links_) out.insert(link);
  return out;
}

BrokenLinks RoundDriver::links_to_avoid(Millis unheard_for) {
  // A member's report counts while it is a member, and so do the members it names that still are
  // (a member gone has no site here); the producer's own, as its site's sentinel, too.
  const auto now = Clock::now();
  std::map<uint32_t, std::vector<uint32_t>> unheard;
  std::vector<uint32_t> members;
  SiteOf sites;
  const auto records = membership_.snapshot();
  for (const MemberRecord& m : records) {
    if (!m.alive) continue;
    members.push_back(m.id);
    if (m.away_from(options_.site)) sites[m.id] = m.site;
  }
  for (const MemberRecord& m : records) {
    if (!m.alive) continue;
    for (const auto& [id, since] : m.unheard) {
      if (now - since >= unheard_for) unheard[m.id].push_back(id);
    }
  }
  unheard[kProducerSender] = relay_.unheard_watched(unheard_for);
  BrokenLinks links = recent_broken_links();
  links.merge(unheard_links(unheard, standby_links(with_producer(members), sites), sites));
  return links;
}

void RoundDriver::note_broken_link(const std::string& from, const std::string& into) {
  std::lock_guard<std::mutex> lock(broken_mu_);
  broken_links_[{from, into}] = Clock::now();
}

std::optional<RoundProgress> RoundDriver::progress() const {
  std::optional<InFlight> round;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    round = in_flight_;
  }
  if (!round) return std::nullopt;
  RoundProgress p;
  p.version = round->version;
  p.full = round->full;
  p.bytes = round->bytes;
  p.targets = static_cast<uint32_t>(round->targets.size());
  p.seconds = std::chrono::duration<double>(Clock::now() - round->start).count();
  for (const MemberRecord& m : membership_.snapshot()) {
    if (!std::binary_search(round->targets.begin(), round->targets.end(), m.id)) continue;
    if (m.committed >= round->version) ++p.committed;
    if (m.committed >= round->version || m.base >= round->version) {
      ++p.staged;
      p.received_bytes += round->bytes;
    } else if (m.transfer == round->transfer) {
      p.received_bytes += std::min<uint64_t>(round->bytes, uint64_t{m.arrived} * round->slice_bytes);
    }
  }
  return p;
}

}  // namespace deltacast
