#include "broadcast/round.h"

#include <algorithm>
#include <set>

#include "core/log.h"

#include <fmt/ranges.h>

namespace deltacast {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where the round stands, read from the member table.
struct RoundLook {
  std::set<uint32_t> committed, failed, gone, staged;
  std::map<uint32_t, std::string> have;
  uint64_t progress = 0;  // grows with every slice, staging and commit anywhere

  bool finished(size_t targets) const { return committed.size() + failed.size() + gone.size() >= targets; }
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
    if (r.committed >= version) {
      look.committed.insert(id);
      look.staged.insert(id);
      look.progress += 2;
    } else if (r.failed_version == version) {
      look.failed.insert(id);
    } else if (r.base >= version) {
      look.staged.insert(id);
      look.progress += 1;
    }
  }
  return look;
}

Json directory_json(const std::map<uint32_t, PeerEndpoints>& directory) {
  Json out = Json::object();
  for (const auto& [id, rails] : directory) {
    Json list = Json::array();
    for (const auto& e : rails) list.push_back(e.to_string());
    out[std::to_string(id)] = list;
  }
  return out;
}

std::vector<uint32_t> heads_of(const Plan& plan) {
  std::vector<uint32_t> heads;
  for (uint32_t s = 0; s < plan.stripes(); ++s) heads.push_back(plan.head(s));
  return heads;
}

}  // namespace

RoundResult RoundDriver::run(const RoundSpec& spec, const std::function<bool()>& stop) {
  RoundResult result;
  const auto start = Clock::now();

  // Members still here, their data endpoints and rates.
  std::vector<PlanMember> in_plan;
  std::map<uint32_t, PeerEndpoints> directory;
  std::vector<double> rates;
  std::vector<uint32_t> targets;
  for (const MemberRecord& m : membership_.snapshot()) {
    if (std::find(spec.targets.begin(), spec.targets.end(), m.id) == spec.targets.end()) continue;
    targets.push_back(m.id);
    in_plan.push_back({m.id, m.rate, m.rate_from, m.slow});
    directory[m.id] = m.rails;
    if (m.rate > 0) rates.push_back(m.rate);
  }
  for (uint32_t id : spec.targets) {
    if (std::find(targets.begin(), targets.end(), id) == targets.end()) result.lost.push_back(id);
  }
  if (targets.empty()) return result;

  const double rate = rates.empty() ? options_.default_rate : upper_median(rates);
  uint32_t stripes = options_.stripes != 0 ? options_.stripes : default_stripes(targets.size());
  const uint32_t slice_bytes =
      options_.slice_bytes != 0
          ? options_.slice_bytes
          : alpha_beta_slice_bytes(spec.bytes / stripes, static_cast<uint32_t>(targets.size()), options_.alpha_seconds,
                                   rate);
  const uint32_t slices = static_cast<uint32_t>((spec.bytes + slice_bytes - 1) / slice_bytes);
  stripes = std::max<uint32_t>(1, std::min(stripes, slices));
  Plan plan = plan_chains(in_plan, stripes, reference_rate_);
  reference_rate_ = next_reference_rate(reference_rate_, in_plan, plan);
  result.first_plan = plan;
  if (log().should_log(spdlog::level::debug)) {
    std::string rates_text;
    for (const auto& m : in_plan) rates_text += fmt::format(" {}:{:.0f}MB/s", m.id, m.rate / 1e6);
    log().debug("version {}: {} stripes of {}-byte slices; chains {}; rates{}; healthy {:.0f}MB/s; slow {}",
                spec.version, stripes, slice_bytes, fmt::format("{}", plan.chains), rates_text, reference_rate_ / 1e6,
                fmt::format("{}", plan.slow));
  }
  result.slice_bytes = slice_bytes;
  result.stripes = stripes;

  membership_.update([&](std::map<uint32_t, MemberRecord>& all) {
    for (uint32_t id : targets) {
      auto it = all.find(id);
      if (it == all.end()) continue;
      it->second.transfer = spec.transfer;
      it->second.arrived = 0;
      it->second.have.clear();
      it->second.failed_version = 0;
      it->second.slow = std::find(plan.slow.begin(), plan.slow.end(), id) != plan.slow.end();
    }
  });
  const Json announce = {{"type", msg::kVersion},   {"version", spec.version},    {"base", spec.base},
                         {"full", spec.full},       {"transfer", spec.transfer},  {"bytes", spec.bytes},
                         {"slice_bytes", slice_bytes}, {"stripes", stripes},     {"blob_hash", spec.blob_hash},
                         {"chains", plan.chains},   {"directory", directory_json(directory)}};
  for (uint32_t id : targets) membership_.send(id, announce);
  relay_.begin(spec.transfer, spec.data, spec.bytes, slice_bytes, stripes, true);
  if (Status s = relay_.set_children(heads_of(plan), directory, {}); !s.ok()) {
    log().error("round for version {}: {}", spec.version, s.to_string());
  }

  const Millis timeout = options_.timeout.count() != 0
                             ? options_.timeout
                             : Millis(30000 + static_cast<int64_t>(spec.bytes / 10000));  // 10 MB/s
  auto last_progress_at = Clock::now();
  uint64_t last_progress = 0;
  bool all_staged = false;
  RoundLook look;
  for (;;) {
    membership_.wait(Millis(100), [&](const std::map<uint32_t, MemberRecord>& all) {
      look = look_at(all, targets, spec.version, spec.transfer);
      const bool broken = std::any_of(in_plan.begin(), in_plan.end(), [&](const PlanMember& m) {
        return look.gone.count(m.id) != 0 || look.failed.count(m.id) != 0;
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
      log().error("version {}: round {} with {} of {} members done", spec.version,
                  stop() ? "stopped" : stalled ? "stalled" : "timed out",
                  look.committed.size(), targets.size());
      for (uint32_t id : targets) {
        if (!look.committed.count(id) && !look.gone.count(id)) look.failed.insert(id);
      }
      break;
    }
    // A member of the chains died or failed: re-parent its children.
    std::vector<uint32_t> dropped;
    for (const auto& m : in_plan) {
      if (look.gone.count(m.id) || look.failed.count(m.id)) dropped.push_back(m.id);
    }
    if (dropped.empty()) continue;
    std::erase_if(in_plan, [&](const PlanMember& m) { return std::find(dropped.begin(), dropped.end(), m.id) != dropped.end(); });
    for (uint32_t id : dropped) {
      directory.erase(id);
      relay_.forget_peer(id);
    }
    if (in_plan.empty()) continue;
    for (auto& m : in_plan) {
      if (auto r = membership_.member(m.id)) m.rate = r->rate;
    }
    plan = plan_chains(in_plan, stripes, reference_rate_);
    ++result.replans;
    std::map<uint32_t, std::vector<bool>> have;
    Json have_json = Json::object();
    for (const auto& [id, hex] : look.have) {
      if (!directory.count(id) || hex.empty()) continue;
      auto bits = decode_bitmap(hex, slices);
      if (!bits.ok()) continue;
      have[id] = *bits;
      have_json[std::to_string(id)] = hex;
    }
    log().warn("version {}: consumers {} dropped out; re-planned {} stripes over {} consumers", spec.version,
               fmt::join(dropped, ","), stripes, in_plan.size());
    const Json replan = {{"type", msg::kPlan},
                         {"transfer", spec.transfer},
                         {"chains", plan.chains},
                         {"directory", directory_json(directory)},
                         {"have", have_json}};
    for (const auto& m : in_plan) membership_.send(m.id, replan);
    if (Status s = relay_.set_children(heads_of(plan), directory, have); !s.ok()) {
      log().error("round for version {}: {}", spec.version, s.to_string());
    }
  }

  relay_.end();
  const Json done = {{"type", msg::kDone}, {"version", spec.version}};
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
  for (uint32_t id : look.gone) result.lost.push_back(id);
  return result;
}

}  // namespace deltacast
