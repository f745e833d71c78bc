#include "broadcast/transport/slice_table.h"

namespace deltacast {

void SliceTable::open(const TransferShape& shape, TimePoint now) {
  *this = SliceTable();
  open_ = true;
  shape_ = shape;
  const uint32_t n = shape.slices();
  flags_.assign(n, 0);
  live_.assign(n, 0);
  pages_.resize((n + kPageSlices - 1) / kPageSlices);
  opened_ = now;
}

void SliceTable::close(TimePoint now) {
  open_ = false;
  queue_.clear();
  track_busy(now);  // the record ends here: link_sample() stays as it was
  track_backlog(now);
}

void SliceTable::track_busy(TimePoint now) {
  const bool busy = open_ && offered_count_ > done_count_;
  if (busy && !busy_) busy_from_ = now;
  if (!busy && busy_) busy_seconds_ += seconds(now - busy_from_);
  busy_ = busy;
}

void SliceTable::track_backlog(TimePoint now) {
  const bool backlogged = open_ && !finished() && !queue_.empty();
  if (backlogged && !backlogged_) backlog_from_ = now;
  if (!backlogged && backlogged_) backlog_seconds_ += seconds(now - backlog_from_);
  backlogged_ = backlogged;
}

bool SliceTable::offer(uint32_t slice, TimePoint now, std::optional<uint64_t> checksum,
                       std::shared_ptr<const trust::LeafTags> leaf_tags) {
  if (!open_ || slice >= shape_.slices() || is(slice, kOffered)) return false;
  if (checksum) {
    set_checksum(slice, *checksum);
    if (is(slice, kChecksummed)) pages_[slice / kPageSlices]->leaf_tags[slice % kPageSlices] = std::move(leaf_tags);
  }
  flags_[slice] |= kOffered;
  ++offered_count_;
  // Not queued while a copy is in flight (one sent before it was skipped, then wanted again):
  // that copy's loss queues it (requeue).
  if (!is(slice, kDone) && !is(slice, kQueued) && live_[slice] == 0) {
    flags_[slice] |= kQueued;
    queue_.push_back(slice);
  }
  track_busy(now);
  return true;
}

void SliceTable::offer_all(TimePoint now) {
  for (uint32_t i = 0; i < shape_.slices(); ++i) (void)offer(i, now);
}

bool SliceTable::skip(uint32_t slice, TimePoint now) {
  if (!open_ || slice >= shape_.slices() || is(slice, kDone)) return false;
  if (!is(slice, kOffered)) {
    flags_[slice] |= kOffered;
    ++offered_count_;
  }
  flags_[slice] |= kSkipped;
  mark_done(slice, now);
  return true;
}

bool SliceTable::unskip(uint32_t slice, TimePoint now) {
  if (!open_ || slice >= shape_.slices() || !is(slice, kSkipped)) return false;
  // kQueued stays: a stale entry of the queue may still name it, and offer() adds no second one.
  flags_[slice] &= static_cast<uint8_t>(~(kSkipped | kDone | kOffered));
  --done_count_;
  --offered_count_;
  finished_ = TimePoint{};
  track_busy(now);
  track_backlog(now);
  return true;
}

void SliceTable::mark_done(uint32_t slice, TimePoint now) {
  flags_[slice] |= kDone;
  drop_checksum(slice);
  ++done_count_;
  if (finished()) {
    finished_ = now;
    track_backlog(now);
  }
  track_busy(now);
}

std::optional<uint32_t> SliceTable::next_queued() {
  while (!queue_.empty()) {
    const uint32_t slice = queue_.front();
    if (!is(slice, kDone) && is(slice, kOffered)) return slice;  // not offered: wanted again, not here yet
    queue_.pop_front();
    flags_[slice] &= ~kQueued;
  }
  return std::nullopt;
}

void SliceTable::take(uint32_t slice) {
  if (!queue_.empty() && queue_.front() == slice) queue_.pop_front();
  flags_[slice] &= ~kQueued;
}

bool SliceTable::requeue(uint32_t slice) {
  if (!open_ || is(slice, kDone) || live_[slice] > 0 || is(slice, kQueued)) return false;
  flags_[slice] |= kQueued;
  queue_.push_front(slice);
  ++resent_;
  return true;
}

bool SliceTable::deliver(uint32_t slice, TimePoint now) {
  if (!open_ || is(slice, kDone)) return false;
  delivered_bytes_ += shape_.length(slice);
  ++delivered_slices_;
  mark_done(slice, now);
  return true;
}

std::optional<uint32_t> SliceTable::delivered_for_probe() {
  if (done_count_ == 0) return std::nullopt;
  for (uint32_t k = 0; k < shape_.slices(); ++k) {
    const uint32_t slice = next_probe_++ % shape_.slices();
    if (is(slice, kDone) && !is(slice, kSkipped)) return slice;
  }
  return std::nullopt;
}

void SliceTable::set_checksum(uint32_t slice, uint64_t value) {
  if (is(slice, kDone)) return;  // never sent with it again
  auto& page = pages_[slice / kPageSlices];
  if (!page) page = std::make_unique<ChecksumPage>();
  page->value[slice % kPageSlices] = value;
  if (!is(slice, kChecksummed)) {
    flags_[slice] |= kChecksummed;
    ++page->held;
  }
}

void SliceTable::drop_checksum(uint32_t slice) {
  if (!is(slice, kChecksummed)) return;
  flags_[slice] &= ~kChecksummed;
  auto& page = pages_[slice / kPageSlices];
  page->leaf_tags[slice % kPageSlices] = nullptr;
  if (--page->held == 0) page.reset();
}

LinkSample SliceTable::link_sample(TimePoint now) const {
  LinkSample sample;
  sample.bytes = delivered_bytes_;
  sample.slices = delivered_slices_;
  sample.busy_seconds = busy_seconds_ + (busy_ ? seconds(now - busy_from_) : 0.0);
  sample.backlogged_seconds = backlog_seconds_ + (backlogged_ ? seconds(now - backlog_from_) : 0.0);
  return sample;
}

}  // namespace deltacast
