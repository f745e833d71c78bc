// Sends a transfer over several rails by spraying its slices: each slice
// goes to the rail with the lowest predicted completion time,
// (bytes in flight + slice bytes) / smoothed bandwidth, a small share goes
// elsewhere as probes so that every estimate stays fresh, and a slice whose
// rail errors or misses its deadline (derived from the prediction) is re-sent
// on another rail. The receiver keeps exactly-once arrival state, so copies
// are harmless. Round-robin striping is kept as a mode: the baseline.
//
// Three parts: a RailEstimator per rail (rate, bytes in flight, deadline
// margin), the SliceTable of the open transfer (where every slice stands), and
// the scheduler here, which owns the channels, the copies in flight and the
// thread that places queued slices on rails.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "broadcast/transport/clock.h"
#include "broadcast/transport/rail_estimator.h"
#include "broadcast/transport/rail_health.h"
#include "broadcast/transport/slice_table.h"
#include "broadcast/transport/transfer.h"
#include "broadcast/transport/transport.h"

namespace deltacast {

enum class SprayMode { kSpray, kRoundRobin };
std::string_view spray_mode_name(SprayMode mode);
Result<SprayMode> parse_spray_mode(std::string_view name);

struct SprayOptions {
  SprayMode mode = SprayMode::kSpray;
  uint32_t slice_bytes = 0;          // 0: the slowest measured rail's rate x slice_time (64 per rail before any is measured)
  Millis slice_time{2};              // ... this much transmission time per slice
  uint32_t min_slice_bytes = 64 << 10;
  uint32_t max_slice_bytes = 4 << 20;
  Millis queue_target{8};            // time's worth of bytes a rail may have in flight
  double deadline_factor = 3.0;      // a slice's deadline: this times its predicted completion,
  Millis min_deadline{30};           // ... plus a margin of at least this (more on a jittery rail),
  Millis first_deadline{500};        // ... or this before the rail's bandwidth is measured
  double probe_share = 0.02;         // slices sent to a rail other than the best one
  Millis stall_timeout{5000};        // no slice delivered for this long fails the transfer (for a waiter)
  RailHealthOptions health;
  uint64_t seed = 1;
  // Where time comes from (null: the steady clock). A simulation passes its clock and no
  // scheduler thread: it calls poll() at the times poll() asks for, and everything else happens
  // in the channels' completions and the calls to offer().
  const TimeSource* clock = nullptr;
  bool scheduler_thread = true;
};

struct RailTelemetry {
  std::string name;
  RailState state = RailState::kHealthy;
  double bandwidth_bps = 0;    // smoothed delivery rate, bytes per second (0: not measured yet)
  uint64_t bytes_acked = 0;    // all copies, probes included
  uint64_t slices_acked = 0;
  uint64_t inflight_bytes = 0;
  uint64_t errors = 0;         // sends that failed
  uint64_t timeouts = 0;       // sends that missed their deadline
  uint64_t resent_slices = 0;  // slices this rail failed that had to go again
  uint64_t probes = 0;
  std::optional<trust::Protection> protection;  // what the rail's connection runs (see Channel::protection)
};

struct SprayEvent {
  enum Kind { kSent, kAcked, kFailed, kTimedOut } kind;
  uint32_t rail;
  uint32_t slice;
  uint32_t bytes;
  bool probe;
  TimePoint at;
};

struct TransferResult {
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;
  uint32_t slices = 0;
  double seconds = 0;
  uint64_t resent_slices = 0;
};

class Sprayer {
 public:
  Sprayer(std::vector<std::unique_ptr<Channel>> channels, SprayOptions options);
  ~Sprayer();
  Sprayer(const Sprayer&) = delete;
  Sprayer& operator=(const Sprayer&) = delete;

  // Sends `bytes` bytes as transfer `transfer` and returns once every slice
  // is acknowledged, or an error when no rail delivered anything for
  // stall_timeout (nothing half-delivered is reported as done). `data` only
  // needs to live until send() returns.
  // `leaves`: the content-hash leaf digests of the bytes (core/hash.h), taken where they were
  // made; when the slices start on leaves every slice goes out with the checksum derived from
  // them, otherwise (or without leaves) each channel hashes its slices as it sends them.
  // `leaf_tags`: the bytes' leaf tags (core/trust/leaf_tag.h), made where they were made, which
  // authenticated rails send with the slices that have checksums in place of tagging each payload.
  Result<TransferResult> send(uint64_t transfer, const uint8_t* data, uint64_t bytes,
                              std::span<const uint64_t> leaves = {},
                              std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr);

  // The same, slice by slice, for relays that forward slices as they arrive:
  // open() a transfer (closing any other), offer() each slice once its bytes
  // are in place, skip() those the receiver already holds, wait() for the
  // rest. Offered slices go out from the sprayer's own thread. A stall only
  // counts while offered slices are undelivered, and only fails the transfer
  // for a caller in wait(): without one (a relay) it is logged once and the
  // sprayer keeps trying. `data` must live until close(), which abandons what
  // is left. slice_bytes 0: chosen from the rails' rates. Returns the
  // transfer's shape.
  Result<TransferShape> open(uint64_t transfer, const uint8_t* data, uint64_t bytes, uint32_t slice_bytes = 0);
  void offer(uint32_t slice);
  // Offers a slice whose checksum is already known (a relay forwards the checksum the slice
  // arrived with, so that checksums are the producer's end to end and a slot whose bytes
  // changed since is refused by the next receiver instead of passed on).
  // `leaf_tags`: tags holding the slice's leaves (the producer's for its whole bytes, or the ones
  // the slice arrived with, which a relay forwards as it forwards its checksum): a slice that
  // starts on a leaf goes with them, and an authenticated rail tags only its frame's header.
  void offer(uint32_t slice, uint64_t checksum, std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr);
  void offer_all();
  // Every slice, each with its checksum (checksums[i] for slice i) and the bytes' leaf tags.
  void offer_all(std::span<const uint64_t> checksums,
                 const std::shared_ptr<const trust::LeafTags>& leaf_tags = nullptr);
  void skip(uint32_t slice);
  // A slice skipped before is wanted after all (a relay given more of a child's stripes while its
  // transfer is open): it goes once offered again. Unlike opening the transfer again, what is in
  // flight to the receiver and what it acknowledged here stay.
  void want(uint32_t slice);
  Result<TransferResult> wait(Millis timeout = Millis::max());
  void close();
  // Without a scheduler thread: one round of what the thread would do (deadlines, probes,
  // placing queued slices); returns when to call again (TimePoint::max(): nothing to do until a
  // slice is offered).
  TimePoint poll();
  // Every slice of the open transfer delivered (or skipped).
  bool finished() const;
  // The transfer open now (0: none).
  uint64_t open_transfer() const;
  // How long the receiver has acknowledged nothing of the open transfer while it owed offered
  // slices (0 when it owes none): a receiver that is only slow or congested still acknowledges
  // something now and then; one that hangs, or whose every link is cut, does not.
  Millis silent_for() const;
  // How long a receiver that is only slow may stay silent now: the longest any rail needs to
  // deliver what it holds in flight at its measured rate, plus that rail's round trip (a rail not
  // measured yet: `unmeasured`); 0 with nothing in flight. Across a WAN of a few hundred Mbit/s a
  // pair of 4 MiB slices takes most of a second where a LAN takes milliseconds.
  Millis expected_silence(Millis unmeasured) const;
  // How long since the receiver was last heard on any rail (Channel::receiver_silent_for), or
  // nothing where no rail's backend can tell.
  std::optional<Millis> receiver_silent_for() const;

  std::vector<RailTelemetry> telemetry() const;
  // How the link to the receiver did in the open (or last) transfer.
  LinkSample link_sample() const;
  size_t rails() const;
  // Rails not measured yet are taken at `bytes_per_second` each (see RailEstimator::assume):
  // a relay's new child starts at what its other children's rails measured, not in slow start.
  void assume_rate(double bytes_per_second);
  // Each rail takes its share of `path`'s rate, with its round trip, until it is measured
  // (RailEstimator::assume_path): a relay's new child across a WAN the round measured into its
  // site. Nothing where the path is not PathEstimate::known().
  void assume_path(const PathEstimate& path);

  // Called for every slice event, under the sprayer's lock: keep it short.
  void set_observer(std::function<void(const SprayEvent&)> observer);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace deltacast
