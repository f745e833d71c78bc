#include "broadcast/transport/sprayer.h"

#include <algorithm>
#include <bit>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "broadcast/transport/rail_estimator.h"
#include "core/hash.h"
#include "core/log.h"

namespace deltacast {

std::string_view spray_mode_name(SprayMode mode) { return mode == SprayMode::kSpray ? "spray" : "roundrobin"; }

Result<SprayMode> parse_spray_mode(std::string_view name) {
  if (name == "spray") return SprayMode::kSpray;
  if (name == "roundrobin") return SprayMode::kRoundRobin;
  return invalid_argument("unknown mode '{}' (expected spray or roundrobin)", name);
}

namespace {

struct Rail {
  std::unique_ptr<Channel> channel;
  RailHealth health;
  RailEstimator estimate;
  bool probe_inflight = false;
  RailTelemetry telemetry;
  // The estimator's totals when the open transfer began: the rail's rate in this transfer alone.
  uint64_t delivered_mark = 0;
  double busy_mark = 0;
};

// Slices per rail of a transfer sent before any rail's rate is known.
constexpr double kFirstSlicesPerRail = 64;

// A rail's rate is only taken from this much busy time in one transfer.
constexpr double kMinRailBusySeconds = 0.002;

// One copy of a slice on one rail.
struct Copy {
  uint64_t transfer;
  uint32_t slice;
  uint32_t rail;
  uint32_t bytes;
  TimePoint expected;  // predicted completion
  TimePoint deadline;
  bool probe;
  TimePoint posted = TimePoint::min();
  bool expired = false;
};

}  // namespace

// The scheduler: channels, copies in flight, the open transfer's table, and the thread that
// places its queued slices on rails.
struct Sprayer::State : std::enable_shared_from_this<Sprayer::State> {
  SprayOptions options;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Rail> rails;
  std::map<uint64_t, Copy> copies;  // outstanding sends by id
  uint64_t next_copy = 1;
  std::mt19937_64 rng;
  std::function<void(const SprayEvent&)> observer;
  std::vector<uint32_t> candidates;  // choose()'s, kept: it runs for every slice

  SliceTable table;               // the open transfer
  const uint8_t* data = nullptr;  // its bytes
  Status failure;                 // set when the transfer stalled for good
  TimePoint last_progress{};
  // The last acknowledgement from the receiver, or when it was last owed nothing: how long it has
  // been silent while it owes slices (silent_for).
  TimePoint last_heard{};

  bool owed() const { return active() && table.offered_count() > table.done_count(); }
  // Before offering: a receiver that owed nothing starts owing now (a relay's trickle of slices
  // must not count the idle time between them as silence).
  void will_offer(TimePoint now) {
    if (!owed()) last_heard = now;
  }
  std::thread scheduler;
  bool stop = false;
  bool draining = false;  // close() is waiting for this transfer's copies to come back
  uint32_t waiters = 0;   // callers in wait(): only they can be told that the transfer stalled
  TimePoint waiting_since{};  // ... and only of a stall that lasted while they waited
  bool stall_reported = false;

  TimePoint now() const { return options.clock != nullptr ? options.clock->now() : SteadyClock::now(); }
  bool active() const { return table.is_open(); }
  uint64_t transfer() const { return table.shape().id; }

  void emit(SprayEvent::Kind kind, const Copy& c, TimePoint now) {
    if (observer) observer(SprayEvent{kind, c.rail, c.slice, c.bytes, c.probe, now});
  }

  void requeue(uint32_t slice, Rail& rail) {
    if (table.requeue(slice)) ++rail.telemetry.resent_slices;
  }

  void on_done(uint64_t id, const Status& status) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = copies.find(id);
    if (it == copies.end()) return;
    const Copy c = it->second;
    copies.erase(it);
    Rail& rail = rails[c.rail];
    const TimePoint now = this->now();
    if (c.probe) rail.probe_inflight = false;
    const bool current = active() && c.transfer == transfer();
    if (current && !c.expired) table.drop_copy(c.slice);
    rail.estimate.on_done(c.bytes, status.ok(), c.expected, now, c.posted);
    if (status.ok()) {
      if (current) last_heard = now;
      rail.health.on_success(now);
      ++rail.telemetry.slices_acked;
      rail.telemetry.bytes_acked += c.bytes;
      if (current && table.deliver(c.slice, now)) last_progress = now;
      emit(SprayEvent::kAcked, c, now);
      if (current && !draining && !table.finished() && failure.ok()) {
        // The acknowledgement made room on this rail: the next queued slices go out from here,
        // on the channel's thread, instead of waking the scheduler for each slice (on a machine
        // with few cores that wake-up is a context switch per slice).
        place(now);
        return;
      }
    } else {
      ++rail.telemetry.errors;
      if (!c.expired) rail.health.on_failure(now);  // an expired copy was counted when it expired
      log().debug("rail {} slice {}: {}", rail.channel->rail().to_string(), c.slice, status.to_string());
      if (current) requeue(c.slice, rail);
      emit(SprayEvent::kFailed, c, now);
    }
    cv.notify_all();
  }

  // Posts one copy of `slice` on rail `r`. Called with the lock held; the channel never runs
  // callbacks inside send(), so this cannot re-enter.
  void post(uint32_t r, uint32_t slice, bool probe, TimePoint now) {
    Rail& rail = rails[r];
    const TransferShape& shape = table.shape();
    const uint32_t length = shape.length(slice);
    const double predicted = rail.estimate.predicted_seconds(length);
    const auto deadline_span =
        rail.estimate.deadline(length, options.deadline_factor, options.min_deadline, options.first_deadline,
                               rail.channel->initial_window());
    rail.estimate.on_post(length, now);
    const uint64_t id = next_copy++;
    const Copy c{shape.id,
                 slice,
                 r,
                 length,
                 now + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(predicted)),
                 now + deadline_span,
                 probe,
                 now};
    copies.emplace(id, c);
    table.add_copy(slice);
    if (probe) {
      rail.probe_inflight = true;
      ++rail.telemetry.probes;
    }
    emit(SprayEvent::kSent, c, now);
    std::weak_ptr<State> self = weak_from_this();
    // A slice offered without a checksum is hashed by its channel's own thread just before the
    // send reads the bytes (in parallel across rails, and from cache for the send).
    const SliceRef ref = table.has_checksum(slice) ? shape.slice(slice, table.checksum(slice), table.leaf_tags(slice))
                                                   : shape.unhashed_slice(slice);
    rail.channel->send(ref, data + shape.offset(slice), [self, id](Status s) {
      if (auto state = self.lock()) state->on_done(id, s);
    });
  }

  bool usable(uint32_t r, TimePoint now) {
    const RailState s = rails[r].health.state(now);
    return (s == RailState::kHealthy || s == RailState::kSuspect) && rails[r].channel->ready();
  }

  bool has_room(uint32_t r, uint32_t length) const {
    return rails[r].estimate.has_room(length, table.shape().slice_bytes, options.queue_target);
  }

  // The rail for the next slice, or -1 when none can take it now.
  int choose(uint32_t slice, uint32_t length, TimePoint now) {
    const uint32_t n = static_cast<uint32_t>(rails.size());
    if (options.mode == SprayMode::kRoundRobin) {
      // Static striping: slice i belongs to rail i mod n; a rail that cannot carry anything
      // hands its slices to the next one, a merely busy rail is waited for.
      for (uint32_t k = 0; k < n; ++k) {
        const uint32_t r = (slice + k) % n;
        if (usable(r, now)) return has_room(r, length) ? static_cast<int>(r) : -1;
      }
      return -1;
    }
    // A rail not measured yet beside measured ones (it carried nothing before: its port was
    // down, or the transfers before were too short for it) is taken at the slowest measured
    // rate, not at the guess for a sprayer that knows nothing: at the guess it loses every
    // choice until the measured rails have a queue_target of slices queued, so every slice waits
    // that long, and it is left to probes to be measured. Its window opens at that rate too
    // (assumed until its first sample replaces it), as a new sprayer's rails open at what other
    // sprayers measured over the same NICs (a rail dead from the start then holds a window of
    // slices until the first deadline moves them, as such a new sprayer's does). Held to two
    // slices in flight for its first 16, it
    // carried a fraction of its share of a short transfer while the measured rails queued the
    // rest (a first version of 0.2 GB, about 14 slices per rail, left 2,046 of 2,048 rails
    // unmeasured at 1,024 simulated consumers, and the next version took 2.5x as long).
    double slowest_measured = 0;
    for (const Rail& rail : rails) {
      const double b = rail.estimate.bandwidth();
      if (b > 0 && (slowest_measured == 0 || b < slowest_measured)) slowest_measured = b;
    }
    if (slowest_measured > 0) {
      for (Rail& rail : rails) {
        if (rail.estimate.bandwidth() == 0 && !rail.estimate.assuming()) rail.estimate.assume(slowest_measured);
      }
    }
    candidates.clear();
    int best = -1;
    double best_time = 0;
    for (uint32_t r = 0; r < n; ++r) {
      if (!usable(r, now) || !has_room(r, length)) continue;
      candidates.push_back(r);
      const RailEstimator& estimate = rails[r].estimate;
      const double t = estimate.predicted_seconds(length, slowest_measured > 0 ? slowest_measured : estimate.assumed());
      if (best < 0 || t < best_time) best = static_cast<int>(r), best_time = t;
    }
    if (candidates.size() > 1 && std::uniform_real_distribution<double>(0, 1)(rng) < options.probe_share) {
      return static_cast<int>(candidates[rng() % candidates.size()]);
    }
    return best;
  }

  // Copies past their deadline: the rail counts a failure and the slice goes elsewhere. Returns
  // the rails that this paused (their connections get a fresh start) and lowers `next` to the
  // earliest deadline still ahead.
  std::vector<uint32_t> expire(TimePoint now, TimePoint& next) {
    std::vector<uint32_t> paused;
    for (auto& [id, c] : copies) {
      if (c.expired || c.transfer != transfer()) continue;
      if (c.deadline > now) {
        next = std::min(next, c.deadline);
        continue;
      }
      c.expired = true;
      Rail& rail = rails[c.rail];
      ++rail.telemetry.timeouts;
      rail.health.on_failure(now);
      table.drop_copy(c.slice);
      requeue(c.slice, rail);
      emit(SprayEvent::kTimedOut, c, now);
      if (rail.health.state(now) == RailState::kPaused) paused.push_back(c.rail);
    }
    std::sort(paused.begin(), paused.end());
    paused.erase(std::unique(paused.begin(), paused.end()), paused.end());
    return paused;
  }

  // A rail whose backoff is over carries one slice to show it works again: a queued one, or a
  // delivered one sent again only to test it (never a skipped one: its bytes may not be here).
  void send_probes(TimePoint now) {
    for (uint32_t r = 0; r < rails.size(); ++r) {
      Rail& rail = rails[r];
      if (rail.health.state(now) != RailState::kProbing || rail.probe_inflight || !rail.channel->ready()) continue;
      if (auto slice = table.next_queued()) {
        table.take(*slice);
        post(r, *slice, true, now);
      } else if (auto again = table.delivered_for_probe()) {
        post(r, *again, true, now);
      }
    }
  }

  // Queued slices (new ones and re-sends) to rails with room, from whichever thread made room or
  // work: the scheduler's, a channel's delivering an acknowledgement, or the caller offering slices
  // (a relay offers each as it lands). The scheduler thread, awake since open(), keeps the deadlines.
  void place(TimePoint now) {
    if (!failure.ok()) return;
    while (auto slice = table.next_queued()) {
      const int r = choose(*slice, table.shape().length(*slice), now);
      if (r < 0) break;
      table.take(*slice);
      post(static_cast<uint32_t>(r), *slice, false, now);
    }
    table.track_backlog(now);
  }

  // One round of scheduling for the open transfer; returns when to look again.
  TimePoint step(std::unique_lock<std::mutex>& lock) {
    const TimePoint now = this->now();
    TimePoint next = now + std::chrono::milliseconds(10);
    // A stall is only a stall while something offered is still undelivered.
    if (table.offered_count() == table.done_count()) last_progress = now;
    // A waiter is told only of a stall that lasted while it waited.
    const TimePoint quiet_since = waiters > 0 ? std::max(last_progress, waiting_since) : last_progress;
    if (now - quiet_since > options.stall_timeout) {
      const std::string why =
          fmt::format("transfer {}: no slice delivered for {} ms ({} of {} slices done); rails: {}", transfer(),
                      options.stall_timeout.count(), table.done_count(), table.shape().slices(), describe_rails(now));
      if (waiters > 0) {
        failure = unavailable("{}", why);
        cv.notify_all();
        return next;
      }
      // Nobody waits (a relay forwarding slices as they land): giving up would starve the child
      // for the rest of the round even once the rails come back, so the sprayer keeps trying and
      // the round, which watches every member's progress, decides. Said once, so it is not silent.
      if (!stall_reported) log().warn("{}; still trying (the round decides)", why);
      stall_reported = true;
    }
    if (const auto paused = expire(now, next); !paused.empty()) {
      // A rail that stalls silently gets a fresh connection: its stuck bytes fail at once and,
      // once the path is back, the reconnect finds it sooner than TCP's own retransmissions.
      lock.unlock();
      for (uint32_t r : paused) rails[r].channel->reset();
      lock.lock();
      return now;
    }
    send_probes(now);
    place(now);
    return next;
  }

  void run_scheduler() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      if (!active() || !failure.ok() || table.finished()) {
        cv.wait(lock);
        continue;
      }
      const TimePoint next = step(lock);
      if (active() && !table.finished() && failure.ok()) cv.wait_until(lock, next);
    }
  }

  uint32_t pick_slice_bytes(uint64_t total, TimePoint now) {
    if (options.slice_bytes != 0) return options.slice_bytes;
    double slowest = 0;
    for (uint32_t r = 0; r < rails.size(); ++r) {
      if (!usable(r, now) || rails[r].estimate.bandwidth() <= 0) continue;
      const double rate = rails[r].estimate.bandwidth();
      slowest = slowest == 0 ? rate : std::min(slowest, rate);
    }
    // No rail measured yet (a first transfer): nothing says how fast the rails are, so the
    // transfer is cut into kFirstSlicesPerRail slices per rail, enough for every rail's rate to
    // be measured early and for a failed slice to cost little, without paying per-slice costs
    // thousands of times on fast rails.
    const double want = slowest > 0 ? slowest * std::chrono::duration<double>(options.slice_time).count()
                                     : static_cast<double>(total) / (kFirstSlicesPerRail * rails.size());
    uint64_t size = std::bit_floor(static_cast<uint64_t>(std::max(want, 1.0)));
    size = std::clamp<uint64_t>(size, options.min_slice_bytes, options.max_slice_bytes);
    // A small transfer still goes in several slices, so that every rail can help.
    while (size > options.min_slice_bytes && total / size < 4 * rails.size()) size /= 2;
    return static_cast<uint32_t>(size);
  }

  bool outstanding() const {
    return std::any_of(copies.begin(), copies.end(), [&](const auto& entry) { return entry.second.transfer == transfer(); });
  }

  // Copies of this transfer still outstanding (stuck on a stalled rail, or probes) hold
  // pointers into the caller's data: their channels are reset and their callbacks awaited.
  void drain(std::unique_lock<std::mutex>& lock) {
    std::vector<uint32_t> stuck;
    for (const auto& [id, c] : copies) {
      if (c.transfer == transfer() && std::find(stuck.begin(), stuck.end(), c.rail) == stuck.end()) stuck.push_back(c.rail);
    }
    draining = true;  // every completion from here on wakes this wait
    if (!stuck.empty()) {
      // Acked copies finish on their own in a moment; only copies that are not moving need a reset.
      // (Without a scheduler thread the completions run on the caller's own event loop: none can
      // come while it waits here.)
      if (options.scheduler_thread) cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !outstanding(); });
      lock.unlock();
      for (uint32_t r : stuck) rails[r].channel->reset();
      lock.lock();
    }
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return !outstanding(); })) {
      log().error("transfer {}: copies still outstanding after their channels were reset", transfer());
    }
    table.close(now());
    data = nullptr;
    draining = false;
  }

  std::string describe_rails(TimePoint now) {
    std::string s;
    for (auto& rail : rails) {
      if (!s.empty()) s += ", ";
      s += fmt::format("{} {}{}", rail.channel->rail().to_string(), rail_state_name(rail.health.state(now)),
                       rail.channel->ready() ? "" : " (not connected)");
    }
    return s;
  }
};

Sprayer::Sprayer(std::vector<std::unique_ptr<Channel>> channels, SprayOptions options)
    : state_(std::make_shared<State>()) {
  state_->options = options;
  state_->rng.seed(options.seed);
  for (auto& channel : channels) {
    Rail rail;
    rail.channel = std::move(channel);
    rail.health = RailHealth(options.health);
    rail.telemetry.name = rail.channel->rail().name.empty() ? rail.channel->rail().to_string() : rail.channel->rail().name;
    state_->rails.push_back(std::move(rail));
  }
  if (options.scheduler_thread) state_->scheduler = std::thread([state = state_.get()] { state->run_scheduler(); });
}

Sprayer::~Sprayer() {
  close();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
  }
  if (state_->scheduler.joinable()) state_->scheduler.join();
  for (auto& rail : state_->rails) rail.channel->close();
}

size_t Sprayer::rails() const { return state_->rails.size(); }

void Sprayer::assume_rate(double bytes_per_second) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& rail : state_->rails) rail.estimate.assume(bytes_per_second);
}

void Sprayer::assume_path(const PathEstimate& path) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->rails.empty() || !path.known()) return;
  const double each = path.bytes_per_second / static_cast<double>(state_->rails.size());
  for (auto& rail : state_->rails) rail.estimate.assume_path(each, path.round_trip);
}

LinkSample Sprayer::link_sample() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const TimePoint now = state_->now();
  LinkSample sample = state_->table.link_sample(now);
  std::vector<double> rates;  // of the rails measured in this transfer
  size_t unmeasured = 0;      // rails carrying slices now that this transfer did not measure
  for (auto& rail : state_->rails) {
    const double round_trip = rail.estimate.base_delay();
    if (round_trip > 0 && (sample.round_trip == 0 || round_trip < sample.round_trip)) sample.round_trip = round_trip;
    const RailState state = rail.health.state(now);
    if (state == RailState::kPaused) continue;
    const double busy = rail.estimate.busy_total(now) - rail.busy_mark;
    if (busy >= kMinRailBusySeconds) {
      rates.push_back(static_cast<double>(rail.estimate.delivered_total() - rail.delivered_mark) / busy);
    } else if (state == RailState::kHealthy || state == RailState::kSuspect) {
      ++unmeasured;  // not a probing one: it failed and has not shown it works again
    }
  }
  sample.rail_rate = link_rail_rate(rates, rates.size() + unmeasured);
  return sample;
}

void Sprayer::set_observer(std::function<void(const SprayEvent&)> observer) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->observer = std::move(observer);
}

std::vector<RailTelemetry> Sprayer::telemetry() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<RailTelemetry> out;
  const TimePoint now = state_->now();
  for (auto& rail : state_->rails) {
    RailTelemetry t = rail.telemetry;
    t.state = rail.health.state(now);
    t.bandwidth_bps = rail.estimate.bandwidth();
    t.inflight_bytes = rail.estimate.inflight();
    t.protection = rail.channel->protection();
    out.push_back(t);
  }
  return out;
}

Result<TransferShape> Sprayer::open(uint64_t transfer, const uint8_t* data, uint64_t bytes, uint32_t slice_bytes) {
  State& s = *state_;
  if (s.rails.empty()) return invalid_argument("no rails to send on");
  close();
  std::lock_guard<std::mutex> lock(s.mu);
  const TimePoint now = s.now();
  if (slice_bytes == 0) slice_bytes = s.pick_slice_bytes(bytes, now);
  DC_ASSIGN_OR_RETURN(TransferShape shape, TransferShape::make(transfer, bytes, slice_bytes));
  s.table.open(shape, now);
  for (auto& rail : s.rails) {
    rail.delivered_mark = rail.estimate.delivered_total();
    rail.busy_mark = rail.estimate.busy_total(now);
  }
  s.data = data;
  s.failure = Status();
  s.stall_reported = false;
  s.last_progress = now;
  s.cv.notify_all();  // the scheduler sleeps without a deadline while no transfer is open
  return shape;
}

void Sprayer::offer(uint32_t slice, uint64_t checksum, std::shared_ptr<const trust::LeafTags> leaf_tags) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const TimePoint now = s.now();
  s.will_offer(now);
  if (s.table.offer(slice, now, checksum, std::move(leaf_tags))) s.place(now);
}

void Sprayer::offer(uint32_t slice) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const TimePoint now = s.now();
  s.will_offer(now);
  if (s.table.offer(slice, now)) s.place(now);
}

void Sprayer::offer_all() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active()) return;
  const TimePoint now = s.now();
  s.will_offer(now);
  s.table.offer_all(now);
  s.place(now);
}

void Sprayer::offer_all(std::span<const uint64_t> checksums, const std::shared_ptr<const trust::LeafTags>& leaf_tags) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active()) return;
  const TimePoint now = s.now();
  s.will_offer(now);
  const uint32_t slices = s.table.shape().slices();
  for (uint32_t i = 0; i < slices && i < checksums.size(); ++i) (void)s.table.offer(i, now, checksums[i], leaf_tags);
  s.place(now);
}

void Sprayer::skip(uint32_t slice) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.table.skip(slice, s.now())) s.cv.notify_all();
}

void Sprayer::want(uint32_t slice) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  (void)s.table.unskip(slice, s.now());
}

Result<TransferResult> Sprayer::wait(Millis timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.active()) return failed_precondition("no transfer is open");
  const auto ready = [&] { return s.table.finished() || !s.failure.ok(); };
  if (s.waiters++ == 0) s.waiting_since = s.now();
  bool in_time = true;
  if (timeout == Millis::max()) {
    s.cv.wait(lock, ready);
  } else {
    in_time = s.cv.wait_for(lock, timeout, ready);
  }
  --s.waiters;
  if (!in_time) {
    return deadline_exceeded("transfer {}: {} of {} slices delivered within {} ms", s.transfer(), s.table.done_count(),
                             s.table.shape().slices(), timeout.count());
  }
  if (!s.failure.ok()) return s.failure;
  const TransferShape& shape = s.table.shape();
  const TimePoint finished = shape.slices() == 0 ? s.table.opened_at() : s.table.finished_at();
  return TransferResult{shape.bytes, shape.slice_bytes, shape.slices(), seconds(finished - s.table.opened_at()),
                        s.table.resent()};
}

TimePoint Sprayer::poll() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.active() || !s.failure.ok() || s.table.finished()) return TimePoint::max();
  return s.step(lock);
}

bool Sprayer::finished() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->active() && state_->table.finished();
}

Millis Sprayer::silent_for() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const State& s = *state_;
  if (!s.owed()) return Millis(0);
  return std::chrono::duration_cast<Millis>(s.now() - s.last_heard);
}

std::optional<Millis> Sprayer::receiver_silent_for() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::optional<Millis> least;
  for (const Rail& rail : state_->rails) {
    const auto silent = rail.channel != nullptr ? rail.channel->receiver_silent_for() : std::nullopt;
    if (silent && (!least || *silent < *least)) least = silent;
  }
  return least;
}

Millis Sprayer::expected_silence(Millis unmeasured) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  double longest = 0;
  for (const Rail& rail : state_->rails) {
    const RailEstimator& e = rail.estimate;
    if (e.inflight() == 0) continue;
    const double seconds = e.bandwidth() > 0 ? static_cast<double>(e.inflight()) / e.bandwidth() + e.base_delay()
                                             : std::chrono::duration<double>(unmeasured).count();
    longest = std::max(longest, seconds);
  }
  return Millis(static_cast<int64_t>(longest * 1000));
}

uint64_t Sprayer::open_transfer() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->active() ? state_->transfer() : 0;
}

void Sprayer::close() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.active()) return;
  s.drain(lock);
}

Result<TransferResult> Sprayer::send(uint64_t transfer, const uint8_t* data, uint64_t bytes,
                                     std::span<const uint64_t> leaves,
                                     std::shared_ptr<const trust::LeafTags> leaf_tags) {
  DC_ASSIGN_OR_RETURN(const TransferShape shape, open(transfer, data, bytes));
  if (const auto checksums = slice_checksums_from_leaves(leaves, shape)) {
    offer_all(*checksums, leaf_tags);
  } else {
    offer_all();
  }
  auto result = wait();
  close();
  return result;
}

}  // namespace deltacast
