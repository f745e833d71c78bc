#include "broadcast/engine/relay.h"

#include <algorithm>

#include "core/log.h"

namespace deltacast {

Relay::~Relay() {
  end();
  std::lock_guard<std::mutex> lock(mu_);
  senders_.clear();
}

TimePoint Relay::now() const {
  return options_.spray.clock != nullptr ? options_.spray.clock->now() : SteadyClock::now();
}

// The median of what the other children's rails measured (0: none measured). A new child shares
// this node's NICs with them: in slow start, two slices per rail, its slices wait behind the queues
// of the children measured at full speed, its first sample measures that wait, and the share it
// settles at keeps the NICs half idle once the others are done (a new head cost a 2.8 GB version
// to 64 simulated consumers 17%).
double Relay::measured_rate() const {
  std::vector<double> rates;
  for (const auto& [id, sender] : senders_) {
    for (const auto& rail : sender.sprayer->telemetry()) {
      if (rail.bandwidth_bps > 0) rates.push_back(rail.bandwidth_bps);
    }
  }
  if (rates.empty()) return 0;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

Result<Sprayer*> Relay::sender_for(uint32_t id, const PeerEndpoints& endpoints, const PathEstimate* path, bool child) {
  auto it = senders_.find(id);
  if (it != senders_.end() && it->second.endpoints == endpoints) {
    // A standby link (watch) that now carries a child's transfer starts as a new child's would.
    if (!it->second.primed && child) prime(*it->second.sprayer, id, path);
    it->second.primed = it->second.primed || child;
    return it->second.sprayer.get();
  }
  // A new peer, or the id now names another peer: the old sprayer (if any) is replaced.
  if (it != senders_.end()) {
    retired_.push_back(std::move(it->second.sprayer));
    senders_.erase(it);
  }
  std::vector<std::unique_ptr<Channel>> channels;
  Status last_error;
  const size_t rails = std::min(options_.local_rails.size(), endpoints.size());
  for (size_t r = 0; r < rails; ++r) {
    ChannelOptions options = options_.channel;
    options.rail_index = static_cast<uint32_t>(r);
    RailSpec rail{Endpoint{options_.local_rails[r].host, 0}, endpoints[r], fmt::format("to{}.rail{}", id, r)};
    auto channel = options_.transport->connect(rail, options);
    if (channel.ok()) {
      channels.push_back(std::move(channel).value());
    } else {
      last_error = channel.status();  // the other rails carry its share
      log().warn("relay: rail {} to consumer {}: {}", rail.to_string(), id, last_error.message());
    }
  }
  if (channels.empty()) {
    return unavailable("no rail to consumer {} could be opened over {}{}", id, options_.transport->name(),
                       last_error.ok() ? "" : ": " + last_error.message());
  }
  auto sprayer = std::make_unique<Sprayer>(std::move(channels), options_.spray);
  if (child) prime(*sprayer, id, path);
  Sprayer* raw = sprayer.get();
  senders_[id] = Sender{endpoints, std::move(sprayer), child};
  return raw;
}

void Relay::prime(Sprayer& sprayer, uint32_t id, const PathEstimate* path) const {
  // Across a WAN, also the path the round measured into the child's site: a queue target's worth
  // of the other children's (LAN) rate is a small part of what a WAN's round trip holds.
  sprayer.assume_rate(measured_rate());
  if (path != nullptr && path->known()) {
    sprayer.assume_path(*path);
    log().info("relay: consumer {} is across a WAN; its rails start from the {:.1f} MB/s and {:.0f} ms round trip "
               "measured into its site", id, path->bytes_per_second / 1e6, path->round_trip * 1e3);
  }
}

void Relay::begin(const TransferShape& shape, const uint8_t* data, uint32_t stripes,
                  const std::vector<uint64_t>* source_checksums, std::shared_ptr<const trust::LeafTags> leaf_tags) {
  end();
  std::lock_guard<std::mutex> lock(mu_);
  shape_ = shape;
  active_ = true;
  data_ = data;
  stripes_ = std::max<uint32_t>(1, stripes);
  present_.assign(shape.slices(), source_checksums != nullptr ? 1 : 0);
  present_count_ = source_checksums != nullptr ? shape.slices() : 0;
  // Slices that arrive later get the checksum they arrived with (on_slice).
  checksums_ = source_checksums != nullptr ? *source_checksums : std::vector<uint64_t>(shape.slices(), 0);
  // The producer's leaf tags for every slice (none given: slices get the ones they arrived with).
  leaf_tags_.assign(shape.slices(), leaf_tags);
  children_.assign(stripes_, {});
  ended_links_.clear();
  last_arrival_ = now();
}

bool Relay::feeds(uint32_t id, uint32_t stripe) const {
  const auto& mine = children_[stripe];
  return std::find(mine.begin(), mine.end(), id) != mine.end();
}

std::vector<uint32_t> Relay::child_ids() const {
  std::vector<uint32_t> ids;
  for (const auto& stripe : children_) {
    for (uint32_t id : stripe) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  return ids;
}

void Relay::open_child(Sprayer& sender, const std::vector<bool>& fed, const std::vector<bool>* have) {
  (void)sender.open(shape_.id, data_, shape_.bytes, shape_.slice_bytes);
  for (uint32_t i = 0; i < shape_.slices(); ++i) {
    const bool mine = fed[i % stripes_];
    const bool child_has = have != nullptr && i < have->size() && (*have)[i];
    if (!mine || child_has) {
      sender.skip(i);  // another path delivers it, or the child holds it already
    } else if (present_[i]) {
      offer(sender, i);
    }
  }
}

void Relay::extend_child(Sprayer& sender, const std::vector<bool>& fed_before, const std::vector<bool>& fed_now,
                         const std::vector<bool>* have) {
  for (uint32_t i = 0; i < shape_.slices(); ++i) {
    const uint32_t stripe = i % stripes_;
    const bool mine = fed_now[stripe];
    if (fed_before[stripe] == mine) continue;
    const bool child_has = have != nullptr && i < have->size() && (*have)[i];
    if (!mine) {
      sender.skip(i);  // another path delivers it now
    } else if (!child_has) {
      sender.want(i);
      if (present_[i]) offer(sender, i);
    }
  }
}

Status Relay::set_children(const StripeChildren& children, const std::map<uint32_t, PeerEndpoints>& directory,
                           const std::map<uint32_t, std::vector<bool>>& have,
                           const std::map<uint32_t, PathEstimate>& paths) {
  std::vector<std::unique_ptr<Sprayer>> retired;  // destroyed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return failed_precondition("no transfer to forward");
  const StripeChildren before = children_;
  const std::vector<uint32_t> ids_before = child_ids();
  children_ = children;
  children_.resize(stripes_);
  const std::vector<uint32_t> ids = child_ids();
  Status status;
  for (uint32_t id : ids) {
    auto dir = directory.find(id);
    if (dir == directory.end()) {
      status = invalid_argument("no data endpoints for consumer {}", id);
      continue;
    }
    const auto path = paths.find(id);
    auto sender = sender_for(id, dir->second, path == paths.end() ? nullptr : &path->second, true);
    if (!sender.ok()) {
      status = sender.status();  // the plan goes on without this child; the round re-plans if it fails
      continue;
    }
    // A child that keeps its stripes (a re-plan around someone else) keeps its transfer as it is:
    // opening it again would drop its copies in flight and send again what it took since the
    // `have` it reported.
    std::vector<bool> fed_before(stripes_), fed_now(stripes_);
    for (uint32_t s = 0; s < stripes_; ++s) {
      fed_before[s] = std::find(before[s].begin(), before[s].end(), id) != before[s].end();
      fed_now[s] = feeds(id, s);
    }
    const bool open_here = shape_.id != 0 && (*sender)->open_transfer() == shape_.id;
    if (fed_before == fed_now && open_here) continue;
    auto h = have.find(id);
    const std::vector<bool>* holds = h == have.end() ? nullptr : &h->second;
    // One whose stripes changed while its transfer is open here has it extended: opened again,
    // its copies in flight would go again, and so would what it acknowledged here since its
    // report (up to a progress interval old).
    if (open_here) {
      extend_child(**sender, fed_before, fed_now, holds);
    } else {
      open_child(**sender, fed_now, holds);
    }
  }
  // Children that no longer get anything from here: abandon their transfer.
  for (uint32_t id : ids_before) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      auto it = senders_.find(id);
      if (it != senders_.end()) it->second.sprayer->close();
    }
  }
  retired.swap(retired_);
  return status;
}

void Relay::offer(Sprayer& sender, uint32_t slice) { sender.offer(slice, checksums_[slice], leaf_tags_[slice]); }

void Relay::on_slice(uint64_t transfer, uint32_t slice, uint64_t checksum,
                     std::shared_ptr<const trust::LeafTags> leaf_tags) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_ || transfer != shape_.id || slice >= shape_.slices() || present_[slice]) return;
  present_[slice] = 1;
  ++present_count_;
  checksums_[slice] = checksum;
  leaf_tags_[slice] = std::move(leaf_tags);
  last_arrival_ = now();
  for (uint32_t child : children_[slice % stripes_]) {
    auto it = senders_.find(child);
    if (it != senders_.end()) offer(*it->second.sprayer, slice);
  }
}

std::vector<std::pair<uint32_t, const Sprayer*>> Relay::sprayers_of_children() const {
  std::vector<std::pair<uint32_t, const Sprayer*>> out;
  for (uint32_t id : child_ids()) {
    auto it = senders_.find(id);
    if (it != senders_.end() && it->second.sprayer->open_transfer() == shape_.id) {
      out.emplace_back(id, it->second.sprayer.get());
    }
  }
  return out;
}

std::vector<uint32_t> Relay::unheard_children() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> silent;
  if (!active_ || cut_off_itself()) return silent;
  for (const auto& [id, child] : sprayers_of_children()) {
    const Sprayer& sprayer = *child;
    const auto heard = sprayer.receiver_silent_for();
    if (heard && *heard >= options_.watch_unheard_after && sprayer.silent_for() >= options_.watch_unheard_after) {
      silent.push_back(id);
    }
  }
  return silent;
}

// A relay that is itself cut off (its links down, slices no longer reaching it either) finds its
// children silent too: it reports nothing then, or it would send them after itself to the tails.
// (In chains its children are usually one and the same member in every stripe, the chains being
// rotations of one order, so comparing children says nothing.) Its own silence counts from half
// the window: cut off at the same moment as its child, the last slice it received may trail the
// child's last acknowledgement by a little, and the child's silence must not win that race.
bool Relay::cut_off_itself() const {
  const bool all_here = present_count_ == present_.size();
  return !all_here && now() - last_arrival_ >= options_.unreachable_after / 2;
}

std::vector<uint32_t> Relay::unreachable_children() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> silent;
  if (!active_ || cut_off_itself()) return silent;
  for (const auto& [id, child] : sprayers_of_children()) {
    const Sprayer& sprayer = *child;
    // A rail not measured yet (a new child's first slices) is given half the window more. (Twice
    // the window more did not stop the false reports of a cold cluster's first version across a
    // 40 ms WAN in the namespace test of sites, and it slows finding a child cut from the start.)
    const Millis allowed = options_.unreachable_after +
                           std::min(2 * sprayer.expected_silence(options_.unreachable_after / 4), Millis(10000));
    // A receiver whose heartbeats still arrive on some rail is alive and reachable: its slices
    // are only slow (across a WAN, a new connection's slow start outlasts any fixed allowance).
    // For a while: one whose data path hangs while its heartbeat thread runs is reported after
    // four allowances (5 s at least).
    const Millis quiet = sprayer.silent_for();
    const auto heard = sprayer.receiver_silent_for();
    // One heard on no rail at all for a while, heartbeats included, is cut off or gone, however
    // slow its link: reported without waiting for its slices in flight.
    if (heard && *heard >= options_.unheard_after && quiet >= options_.unheard_after) {
      silent.push_back(id);
      continue;
    }
    if (heard && *heard < options_.unreachable_after && quiet < std::max(4 * allowed, Millis(5000))) continue;
    if (quiet >= allowed) silent.push_back(id);
  }
  return silent;
}

TimePoint Relay::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  TimePoint next = TimePoint::max();
  for (auto& [id, sender] : senders_) next = std::min(next, sender.sprayer->poll());
  return next;
}

void Relay::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return;
  ended_links_ = links_of_children(true);  // before closing: a closed sprayer's transfer is over
  for (auto& [id, sender] : senders_) sender.sprayer->close();
  active_ = false;
  data_ = nullptr;
}

void Relay::forget_peer(uint32_t id) {
  std::unique_ptr<Sprayer> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = senders_.find(id);
    if (it == senders_.end()) return;
    gone = std::move(it->second.sprayer);
    senders_.erase(it);
  }
  // Destroyed outside the lock: closing drains its copies.
}

Status Relay::watch(const std::map<uint32_t, PeerEndpoints>& peers) {
  std::vector<std::unique_ptr<Sprayer>> retired;  // destroyed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<uint32_t> children = child_ids();
  for (uint32_t id : watched_) {
    if (peers.count(id) || std::find(children.begin(), children.end(), id) != children.end()) continue;
    const auto it = senders_.find(id);
    if (it == senders_.end()) continue;
    retired_.push_back(std::move(it->second.sprayer));
    senders_.erase(it);
  }
  watched_.clear();
  Status status;
  for (const auto& [id, endpoints] : peers) {
    auto sender = sender_for(id, endpoints, nullptr, false);
    if (sender.ok()) {
      watched_.insert(id);
    } else {
      status = sender.status();
    }
  }
  retired.swap(retired_);
  return status;
}

std::map<uint32_t, std::optional<Millis>> Relay::watched_silence() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<uint32_t, std::optional<Millis>> silence;
  for (uint32_t id : watched_) {
    const auto it = senders_.find(id);
    if (it != senders_.end()) silence[id] = it->second.sprayer->receiver_silent_for();
  }
  return silence;
}

std::map<uint32_t, bool> Relay::watched() const {
  std::map<uint32_t, bool> heard;
  for (const auto& [id, silent] : watched_silence()) heard[id] = !silent || *silent < options_.watch_unheard_after;
  return heard;
}

std::vector<uint32_t> Relay::unheard_watched(Millis longer) const {
  std::vector<uint32_t> unheard;
  for (const auto& [id, silent] : watched_silence()) {
    if (silent && *silent >= options_.watch_unheard_after + longer) unheard.push_back(id);
  }
  return unheard;
}

std::vector<RailTelemetry> Relay::telemetry(uint32_t child) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = senders_.find(child);
  return it == senders_.end() ? std::vector<RailTelemetry>{} : it->second.sprayer->telemetry();
}

std::map<uint32_t, std::vector<RailTelemetry>> Relay::telemetry_by_child() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<uint32_t, std::vector<RailTelemetry>> out;
  for (const auto& [id, sender] : senders_) out[id] = sender.sprayer->telemetry();
  return out;
}

std::map<uint32_t, LinkSample> Relay::child_links() const {
  std::lock_guard<std::mutex> lock(mu_);
  return links_of_children(false);
}

std::map<uint32_t, LinkSample> Relay::links_of_children(bool finished_only) const {
  std::map<uint32_t, LinkSample> links;
  for (uint32_t id : child_ids()) {
    auto it = senders_.find(id);
    if (it == senders_.end()) continue;
    const Sprayer& sprayer = *it->second.sprayer;
    if (finished_only && !(sprayer.open_transfer() == shape_.id && sprayer.finished())) continue;
    links[id] = sprayer.link_sample();
  }
  return links;
}

std::map<uint32_t, LinkSample> Relay::finished_links(uint64_t transfer) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (transfer == 0 || transfer != shape_.id) return {};
  return active_ ? links_of_children(true) : ended_links_;
}

}  // namespace deltacast
