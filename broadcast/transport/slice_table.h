// The sending side's record of one open transfer, slice by slice: offered
// (its bytes are in place here), queued for a rail, copies in flight,
// delivered, or skipped (the receiver gets it elsewhere); the checksum each
// slice goes out with, until it is delivered; and how the link to the
// receiver kept up (LinkSample). Not thread-safe: the sprayer calls it under
// its lock, passing the time in.
//
// Every relay holds one per child, each as long as the version has slices, so a slice costs
// three bytes here (its flags and its copies in flight); checksums (and the leaf tags a relay
// forwards) live in pages of 1,024 slices that exist while one of their slices is offered and not
// yet delivered: a pipeline keeps a few.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "broadcast/transport/rail_health.h"
#include "broadcast/transport/transfer.h"

namespace deltacast {

// How the link to one receiver did in one transfer. A link that had offered slices waiting for
// room on its rails most of the time it had work was the bottleneck of its chain; one that kept
// up moved whatever it was given as it came. Either way `rail_rate` tells its speed in this
// transfer: the sum of its rails' rates, each the bytes it delivered over the time it had
// something in flight, so neither waiting for a relay's own parent to deliver the next slice nor
// a rail left idle while one slice at a time trickles through dilutes it.
struct LinkSample {
  uint64_t bytes = 0;              // first deliveries of this transfer's slices
  uint32_t slices = 0;
  double busy_seconds = 0;         // time with offered slices not yet delivered
  double backlogged_seconds = 0;   // of which, time with offered slices waiting for room
  double rail_rate = 0;            // bytes/s: over its live rails (sprayer; link_rail_rate)
  double round_trip = 0;           // seconds: the shortest base round trip of its rails (0: none measured)

  bool measured() const { return slices > 0 && busy_seconds > 0; }
  double rate() const { return busy_seconds > 0 ? static_cast<double>(bytes) / busy_seconds : 0; }
  double backlogged_share() const { return busy_seconds > 0 ? std::min(1.0, backlogged_seconds / busy_seconds) : 0; }
};

class SliceTable {
 public:
  void open(const TransferShape& shape, TimePoint now);
  // Abandons what is left; the link's record stays readable.
  void close(TimePoint now);
  bool is_open() const { return open_; }
  const TransferShape& shape() const { return shape_; }

  // Its bytes are in place here: queue it, with the checksum it goes out with when one is known,
  // and the leaf tags it arrived with (a relay's: core/trust/leaf_tag.h) when there were some
  // (false when out of range or offered before).
  bool offer(uint32_t slice, TimePoint now, std::optional<uint64_t> checksum = std::nullopt,
             std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr);
  void offer_all(TimePoint now);
  // The receiver gets it elsewhere: done without sending (false when out of range or done).
  bool skip(uint32_t slice, TimePoint now);
  // A skipped slice is wanted after all (a relay given a child's stripe it skipped): it waits to
  // be offered again, and a copy still in flight from before the skip counts (false when it was
  // not skipped).
  bool unskip(uint32_t slice, TimePoint now);

  // The first queued slice still undelivered and offered (others are dropped from the queue), and
  // taking it off the queue to send.
  std::optional<uint32_t> next_queued();
  void take(uint32_t slice);

  // Copies in flight per slice.
  void add_copy(uint32_t slice) { ++live_[slice]; }
  void drop_copy(uint32_t slice) { --live_[slice]; }
  // A slice that lost its last live copy goes back to the front of the queue (true if it did).
  bool requeue(uint32_t slice);
  // A copy was acknowledged: true for the slice's first delivery.
  bool deliver(uint32_t slice, TimePoint now);

  // A delivered (not skipped) slice to send again only to test a rail, in turn.
  std::optional<uint32_t> delivered_for_probe();

  // A delivered slice has none any more: sent again (a probe) its channel hashes its bytes.
  bool has_checksum(uint32_t slice) const { return (flags_[slice] & kChecksummed) != 0; }
  uint64_t checksum(uint32_t slice) const { return pages_[slice / kPageSlices]->value[slice % kPageSlices]; }
  // The leaf tags it was offered with (null: none), kept as long as its checksum.
  const std::shared_ptr<const trust::LeafTags>& leaf_tags(uint32_t slice) const {
    return pages_[slice / kPageSlices]->leaf_tags[slice % kPageSlices];
  }
  void set_checksum(uint32_t slice, uint64_t value);

  // Acknowledged by the receiver over this link (not skipped: a skipped slice may not be there).
  bool delivered(uint32_t slice) const { return is(slice, kDone) && !is(slice, kSkipped); }
  uint32_t offered_count() const { return offered_count_; }
  uint32_t done_count() const { return done_count_; }
  bool finished() const { return done_count_ == shape_.slices(); }
  TimePoint opened_at() const { return opened_; }
  TimePoint finished_at() const { return finished_; }
  uint64_t resent() const { return resent_; }

  // Records whether offered slices are waiting for room, after each scheduling pass.
  void track_backlog(TimePoint now);
  LinkSample link_sample(TimePoint now) const;

 private:
  void track_busy(TimePoint now);
  // Delivered or skipped: done either way.
  void mark_done(uint32_t slice, TimePoint now);

  enum Flag : uint8_t {
    kOffered = 1,
    kDone = 2,
    kSkipped = 4,  // done because the receiver gets it elsewhere: its bytes may not be here
    kQueued = 8,
    kChecksummed = 16,
  };
  static constexpr uint32_t kPageSlices = 1024;
  struct ChecksumPage {
    std::array<uint64_t, kPageSlices> value;
    std::array<std::shared_ptr<const trust::LeafTags>, kPageSlices> leaf_tags;
    uint32_t held = 0;  // its slices with kChecksummed: the page goes when none is left
  };
  bool is(uint32_t slice, Flag f) const { return (flags_[slice] & f) != 0; }
  void drop_checksum(uint32_t slice);

  bool open_ = false;
  TransferShape shape_;
  std::vector<uint8_t> flags_;
  std::vector<uint16_t> live_;
  std::vector<std::unique_ptr<ChecksumPage>> pages_;
  std::deque<uint32_t> queue_;
  uint32_t offered_count_ = 0;
  uint32_t done_count_ = 0;
  uint32_t next_probe_ = 0;
  uint64_t resent_ = 0;
  TimePoint opened_{};
  TimePoint finished_{};
  // The link's record (LinkSample).
  uint64_t delivered_bytes_ = 0;
  uint32_t delivered_slices_ = 0;
  bool busy_ = false;
  TimePoint busy_from_{};
  double busy_seconds_ = 0;
  bool backlogged_ = false;
  TimePoint backlog_from_{};
  double backlog_seconds_ = 0;
};

}  // namespace deltacast
