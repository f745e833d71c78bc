#include "broadcast/sprayer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>

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

// Before a rail's rate is measured it is assumed to be 1 Gbit/s: enough to fill it, and the
// first samples replace the guess within a few tens of milliseconds.
constexpr double kAssumedBandwidth = 125e6;
constexpr auto kSampleWindow = std::chrono::milliseconds(20);

struct Rail {
  std::unique_ptr<Channel> channel;
  RailHealth health;
  double bandwidth = 0;  // bytes per second, 0 until measured
  uint64_t inflight = 0;
  // Rate samples count delivered bytes over the time the rail was busy (something in flight):
  // gaps while it waited for the sprayer do not dilute the rate of the link itself.
  TimePoint busy_start{};
  double busy_seconds = 0;  // banked busy time of the current sample
  uint64_t sample_bytes = 0;
  bool probe_inflight = false;
  // How much later than predicted acks come, smoothed like TCP's RTT (mean and mean deviation,
  // seconds): the deadline margin grows on a jittery rail instead of firing falsely.
  double late_mean = 0;
  double late_dev = 0;
  RailTelemetry telemetry;

  double rate() const { return bandwidth > 0 ? bandwidth : kAssumedBandwidth; }
};

// One copy of a slice on one rail.
struct Copy {
  uint64_t transfer;
  uint32_t slice;
  uint32_t rail;
  uint32_t bytes;
  TimePoint expected;  // predicted completion
  TimePoint deadline;
  bool probe;
  bool expired = false;
};

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct Sprayer::State : std::enable_shared_from_this<Sprayer::State> {
  SprayOptions options;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Rail> rails;
  std::map<uint64_t, Copy> copies;  // outstanding sends by id
  uint64_t next_copy = 1;
  std::mt19937_64 rng;
  std::function<void(const SprayEvent&)> observer;

  // The transfer in progress.
  uint64_t transfer = 0;
  bool active = false;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;
  uint32_t slices = 0;
  std::vector<uint8_t> offered;  // its bytes are in place (a relay offers slices as they arrive)
  uint32_t offered_count = 0;
  uint32_t next_duplicate = 0;   // probes re-send delivered slices when nothing is pending
  Status failure;                // set when the transfer stalled for good
  TimePoint opened{};
  TimePoint finished{};
  std::thread scheduler;
  bool stop = false;
  std::vector<uint8_t> done;
  std::vector<uint8_t> skipped;  // done because the receiver gets them elsewhere: their bytes may not be here
  std::vector<uint16_t> live;  // non-expired copies per slice
  std::vector<uint8_t> queued;  // in `pending`
  std::vector<uint64_t> checksum;  // per slice, computed at its first send
  std::vector<uint8_t> checksummed;
  std::deque<uint32_t> pending;
  uint32_t done_count = 0;
  uint64_t resent = 0;
  uint64_t delivered_bytes = 0;  // first acks of this transfer's slices
  TimePoint first_offer{};
  bool backlogged = false;       // offered slices are waiting for room
  TimePoint backlog_from{};
  double backlog_seconds = 0;

  // Called wherever `pending` may have changed emptiness.
  void track_backlog(TimePoint now) {
    const bool b = active && !pending.empty();
    if (b && !backlogged) backlog_from = now;
    if (!b && backlogged) backlog_seconds += seconds(now - backlog_from);
    backlogged = b;
  }
  TimePoint last_progress{};

  void emit(SprayEvent::Kind kind, const Copy& c, TimePoint now) {
    if (observer) observer(SprayEvent{kind, c.rail, c.slice, c.bytes, c.probe, now});
  }

  // A slice that lost its last live copy goes back to the front of the queue.
  void requeue(uint32_t slice, Rail& rail) {
    if (!active || done[slice] || live[slice] > 0 || queued[slice]) return;
    queued[slice] = 1;
    pending.push_front(slice);
    ++resent;
    ++rail.telemetry.resent_slices;
  }

  void on_done(uint64_t id, const Status& status) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = copies.find(id);
    if (it == copies.end()) return;
    const Copy c = it->second;
    copies.erase(it);
    Rail& rail = rails[c.rail];
    const TimePoint now = SteadyClock::now();
    if (c.probe) rail.probe_inflight = false;
    const bool current = active && c.transfer == transfer;
    if (current && !c.expired) --live[c.slice];
    rail.inflight -= c.bytes;
    if (rail.inflight == 0) {  // the rail goes idle: bank its busy time
      rail.busy_seconds += seconds(now - rail.busy_start);
      rail.busy_start = now;
    }
    if (status.ok()) {
      const double late = std::max(0.0, seconds(now - c.expected));
      rail.late_dev = 0.75 * rail.late_dev + 0.25 * std::abs(late - rail.late_mean);
      rail.late_mean = 0.875 * rail.late_mean + 0.125 * late;
      rail.health.on_success(now);
      ++rail.telemetry.slices_acked;
      rail.telemetry.bytes_acked += c.bytes;
      rail.sample_bytes += c.bytes;
      const double busy = rail.busy_seconds + seconds(now - rail.busy_start);
      if (busy >= std::chrono::duration<double>(kSampleWindow).count()) {
        const double sample = static_cast<double>(rail.sample_bytes) / busy;
        rail.bandwidth = rail.bandwidth == 0 ? sample : 0.7 * rail.bandwidth + 0.3 * sample;
        rail.busy_seconds = 0;
        rail.busy_start = now;
        rail.sample_bytes = 0;
      }
      if (current && !done[c.slice]) {
        done[c.slice] = 1;
        ++done_count;
        delivered_bytes += c.bytes;
        last_progress = now;
        if (transfer_done()) {
          finished = now;
          if (backlogged) backlog_seconds += seconds(now - backlog_from);
          backlogged = false;
        }
      }
      emit(SprayEvent::kAcked, c, now);
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
    const uint64_t offset = static_cast<uint64_t>(slice) * slice_bytes;
    const uint32_t length = length_of(slice);
    if (rail.inflight == 0) rail.busy_start = now;  // busy again
    const double predicted = static_cast<double>(rail.inflight + length) / rail.rate();
    const double margin = std::max(std::chrono::duration<double>(options.min_deadline).count(),
                                   rail.late_mean + 4 * rail.late_dev);
    const auto deadline_span = rail.bandwidth == 0
                                   ? options.first_deadline
                                   : Millis(static_cast<int64_t>(1000 * (options.deadline_factor * predicted + margin)));
    if (!checksummed[slice]) {
      checksum[slice] = xxh3_64(data + offset, length);
      checksummed[slice] = 1;
    }
    const uint64_t id = next_copy++;
    Copy c{transfer, slice, r, length, now + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(predicted)),
           now + deadline_span, probe};
    copies.emplace(id, c);
    ++live[slice];
    rail.inflight += length;
    if (probe) {
      rail.probe_inflight = true;
      ++rail.telemetry.probes;
    }
    emit(SprayEvent::kSent, c, now);
    std::weak_ptr<State> self = weak_from_this();
    rail.channel->send(SliceRef{transfer, bytes, slice_bytes, slice, length, checksum[slice]}, data + offset,
                       [self, id](Status s) {
      if (auto state = self.lock()) state->on_done(id, s);
    });
  }

  bool usable(uint32_t r, TimePoint now) {
    const RailState s = rails[r].health.state(now);
    return (s == RailState::kHealthy || s == RailState::kSuspect) && rails[r].channel->ready();
  }

  bool has_room(uint32_t r, uint32_t length) const {
    const Rail& rail = rails[r];
    // A rail whose rate is not measured yet carries two slices at a time (slow start), so an
    // unknown slow rail cannot swallow a large share before its first acks tell its speed.
    const double window = rail.bandwidth == 0
                              ? 2.0 * slice_bytes
                              : std::max(2.0 * slice_bytes, rail.bandwidth * std::chrono::duration<double>(options.queue_target).count());
    return rail.inflight == 0 || static_cast<double>(rail.inflight + length) <= window;
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
    std::vector<uint32_t> candidates;
    int best = -1;
    double best_time = 0;
    for (uint32_t r = 0; r < n; ++r) {
      if (!usable(r, now) || !has_room(r, length)) continue;
      candidates.push_back(r);
      const double t = static_cast<double>(rails[r].inflight + length) / rails[r].rate();
      if (best < 0 || t < best_time) best = static_cast<int>(r), best_time = t;
    }
    if (candidates.size() > 1 && std::uniform_real_distribution<double>(0, 1)(rng) < options.probe_share) {
      return static_cast<int>(candidates[rng() % candidates.size()]);
    }
    return best;
  }

  uint32_t length_of(uint32_t slice) const {
    return static_cast<uint32_t>(std::min<uint64_t>(slice_bytes, bytes - static_cast<uint64_t>(slice) * slice_bytes));
  }

  bool transfer_done() const { return done_count == slices; }

  // One round of scheduling for the open transfer; returns when to look again.
  TimePoint step(std::unique_lock<std::mutex>& lock) {
    const TimePoint now = SteadyClock::now();
    TimePoint next = now + std::chrono::milliseconds(10);
    // A stall is only a stall while something offered is still undelivered.
    if (offered_count == done_count) last_progress = now;
    if (now - last_progress > options.stall_timeout) {
      failure = unavailable("transfer {}: no slice delivered for {} ms ({} of {} slices done); rails: {}", transfer,
                            options.stall_timeout.count(), done_count, slices, describe_rails(now));
      cv.notify_all();
      return next;
    }
    // Copies past their deadline: the rail counts a failure and the slice goes elsewhere.
    std::vector<uint32_t> to_reset;
    for (auto& [id, c] : copies) {
      if (c.expired || c.transfer != transfer) continue;
      if (c.deadline > now) {
        next = std::min(next, c.deadline);
        continue;
      }
      c.expired = true;
      Rail& rail = rails[c.rail];
      ++rail.telemetry.timeouts;
      rail.health.on_failure(now);
      --live[c.slice];
      requeue(c.slice, rail);
      emit(SprayEvent::kTimedOut, c, now);
      if (rail.health.state(now) == RailState::kPaused) to_reset.push_back(c.rail);
    }
    if (!to_reset.empty()) {
      // A rail that stalls silently gets a fresh connection: its stuck bytes fail at once and,
      // once the path is back, the reconnect finds it sooner than TCP's own retransmissions.
      lock.unlock();
      std::sort(to_reset.begin(), to_reset.end());
      to_reset.erase(std::unique(to_reset.begin(), to_reset.end()), to_reset.end());
      for (uint32_t r : to_reset) rails[r].channel->reset();
      lock.lock();
      return now;
    }
    // Probes: a rail whose backoff is over carries one slice to show it works again.
    for (uint32_t r = 0; r < rails.size(); ++r) {
      Rail& rail = rails[r];
      if (rail.health.state(now) != RailState::kProbing || rail.probe_inflight || !rail.channel->ready()) continue;
      if (!pending.empty()) {
        const uint32_t slice = pending.front();
        pending.pop_front();
        queued[slice] = 0;
        post(r, slice, true, now);
      } else if (done_count > 0) {
        for (uint32_t k = 0; k < slices; ++k) {  // a delivered slice, sent again only to test the rail
          const uint32_t slice = next_duplicate++ % slices;
          if (done[slice] && !skipped[slice]) {
            post(r, slice, true, now);
            break;
          }
        }
      }
    }
    // New slices (and re-sends) to the rails that can take them.
    while (!pending.empty()) {
      const uint32_t slice = pending.front();
      if (done[slice]) {
        pending.pop_front();
        queued[slice] = 0;
        continue;
      }
      const int r = choose(slice, length_of(slice), now);
      if (r < 0) break;
      pending.pop_front();
      queued[slice] = 0;
      post(static_cast<uint32_t>(r), slice, false, now);
    }
    track_backlog(now);
    return next;
  }

  void run_scheduler() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      if (!active || !failure.ok() || transfer_done()) {
        cv.wait(lock);
        continue;
      }
      const TimePoint next = step(lock);
      if (!transfer_done() && failure.ok()) cv.wait_until(lock, next);
    }
  }

  uint32_t pick_slice_bytes(uint64_t total, TimePoint now) {
    if (options.slice_bytes != 0) return options.slice_bytes;
    double slowest = 0;
    for (uint32_t r = 0; r < rails.size(); ++r) {
      if (!usable(r, now)) continue;
      slowest = slowest == 0 ? rails[r].rate() : std::min(slowest, rails[r].rate());
    }
    if (slowest == 0) slowest = kAssumedBandwidth;
    const double want = slowest * std::chrono::duration<double>(options.slice_time).count();
    uint64_t size = std::bit_floor(static_cast<uint64_t>(std::max(want, 1.0)));
    size = std::clamp<uint64_t>(size, options.min_slice_bytes, options.max_slice_bytes);
    // A small transfer still goes in several slices, so that every rail can help.
    while (size > options.min_slice_bytes && total / size < 4 * rails.size()) size /= 2;
    return static_cast<uint32_t>(size);
  }

  // Copies of this transfer still outstanding (stuck on a stalled rail, or probes) hold
  // pointers into the caller's data: their channels are reset and their callbacks awaited.
  void drain(std::unique_lock<std::mutex>& lock) {
    std::vector<uint32_t> stuck;
    for (const auto& [id, c] : copies) {
      if (c.transfer == transfer && std::find(stuck.begin(), stuck.end(), c.rail) == stuck.end()) stuck.push_back(c.rail);
    }
    if (!stuck.empty()) {
      // Acked copies finish on their own in a moment; only copies that are not moving need a reset.
      cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !outstanding(); });
      lock.unlock();
      for (uint32_t r : stuck) rails[r].channel->reset();
      lock.lock();
    }
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return !outstanding(); })) {
      log().error("transfer {}: copies still outstanding after their channels were reset", transfer);
    }
    active = false;
  }

  bool outstanding() const {
    for (const auto& [id, c] : copies) {
      if (c.transfer == transfer) return true;
    }
    return false;
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
  state_->scheduler = std::thread([state = state_.get()] { state->run_scheduler(); });
}

Sprayer::~Sprayer() {
  close();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
  }
  state_->scheduler.join();
  for (auto& rail : state_->rails) rail.channel->close();
}

size_t Sprayer::rails() const { return state_->rails.size(); }

LinkSample Sprayer::link_sample() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  LinkSample sample;
  if (s.first_offer == TimePoint{} || s.delivered_bytes == 0) return sample;
  const TimePoint end = s.finished != TimePoint{} && s.finished > s.first_offer ? s.finished : SteadyClock::now();
  const double span = seconds(end - s.first_offer);
  if (span <= 0) return sample;
  const double backlog = s.backlog_seconds + (s.backlogged ? seconds(end - s.backlog_from) : 0.0);
  sample.rate = static_cast<double>(s.delivered_bytes) / span;
  sample.backlogged_share = std::min(1.0, backlog / span);
  sample.measured = true;
  return sample;
}

void Sprayer::set_observer(std::function<void(const SprayEvent&)> observer) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->observer = std::move(observer);
}

std::vector<RailTelemetry> Sprayer::telemetry() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<RailTelemetry> out;
  const TimePoint now = SteadyClock::now();
  for (auto& rail : state_->rails) {
    RailTelemetry t = rail.telemetry;
    t.state = rail.health.state(now);
    t.bandwidth_bps = rail.bandwidth;
    t.inflight_bytes = rail.inflight;
    out.push_back(t);
  }
  return out;
}

Result<uint32_t> Sprayer::open(uint64_t transfer, const uint8_t* data, uint64_t bytes, uint32_t slice_bytes) {
  State& s = *state_;
  if (s.rails.empty()) return invalid_argument("no rails to send on");
  close();
  std::lock_guard<std::mutex> lock(s.mu);
  const TimePoint now = SteadyClock::now();
  if (slice_bytes == 0) slice_bytes = s.pick_slice_bytes(bytes, now);
  const uint64_t count = (bytes + slice_bytes - 1) / slice_bytes;
  if (count > UINT32_MAX) return invalid_argument("{} bytes is too many slices of {}", bytes, slice_bytes);
  s.transfer = transfer;
  s.active = true;
  s.data = data;
  s.bytes = bytes;
  s.slice_bytes = slice_bytes;
  s.slices = static_cast<uint32_t>(count);
  s.done.assign(s.slices, 0);
  s.skipped.assign(s.slices, 0);
  s.live.assign(s.slices, 0);
  s.queued.assign(s.slices, 0);
  s.offered.assign(s.slices, 0);
  s.checksum.assign(s.slices, 0);
  s.checksummed.assign(s.slices, 0);
  s.pending.clear();
  s.offered_count = 0;
  s.done_count = 0;
  s.next_duplicate = 0;
  s.resent = 0;
  s.delivered_bytes = 0;
  s.first_offer = TimePoint{};
  s.backlogged = false;
  s.backlog_seconds = 0;
  s.failure = Status();
  s.opened = s.last_progress = now;
  s.finished = TimePoint{};
  return slice_bytes;
}

void Sprayer::offer(uint32_t slice, uint64_t checksum) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.active || slice >= s.slices || s.offered[slice]) return;
    s.checksum[slice] = checksum;
    s.checksummed[slice] = 1;
  }
  offer(slice);
}

void Sprayer::offer(uint32_t slice) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active || slice >= s.slices || s.offered[slice]) return;
  if (s.first_offer == TimePoint{}) s.first_offer = SteadyClock::now();
  s.offered[slice] = 1;
  ++s.offered_count;
  s.queued[slice] = 1;
  s.pending.push_back(slice);
  s.cv.notify_all();
}

void Sprayer::offer_all() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active) return;
  if (s.first_offer == TimePoint{}) s.first_offer = SteadyClock::now();
  for (uint32_t i = 0; i < s.slices; ++i) {
    if (s.offered[i]) continue;
    s.offered[i] = 1;
    s.queued[i] = 1;
    s.pending.push_back(i);
  }
  s.offered_count = s.slices;
  s.cv.notify_all();
}

void Sprayer::skip(uint32_t slice) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active || slice >= s.slices || s.done[slice]) return;
  if (!s.offered[slice]) {
    s.offered[slice] = 1;
    ++s.offered_count;
  }
  s.done[slice] = 1;
  s.skipped[slice] = 1;
  ++s.done_count;
  if (s.transfer_done()) s.finished = SteadyClock::now();
  s.cv.notify_all();
}

Result<TransferResult> Sprayer::wait(Millis timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.active) return failed_precondition("no transfer is open");
  const auto ready = [&] { return s.transfer_done() || !s.failure.ok(); };
  if (timeout == Millis::max()) {
    s.cv.wait(lock, ready);
  } else if (!s.cv.wait_for(lock, timeout, ready)) {
    return deadline_exceeded("transfer {}: {} of {} slices delivered within {} ms", s.transfer, s.done_count, s.slices,
                             timeout.count());
  }
  if (!s.failure.ok()) return s.failure;
  TransferResult result{s.bytes, s.slice_bytes, s.slices, seconds(s.finished - s.opened), s.resent};
  return result;
}

void Sprayer::close() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.active) return;
  s.drain(lock);
  s.pending.clear();
  s.data = nullptr;
}

Result<TransferResult> Sprayer::send(uint64_t transfer, const uint8_t* data, uint64_t bytes) {
  DC_RETURN_IF_ERROR(open(transfer, data, bytes).status());
  offer_all();
  auto result = wait();
  close();
  return result;
}

}  // namespace deltacast
