#include "broadcast/transport/staging.h"

#include "broadcast/transport/transfer.h"
#include "core/hash.h"

#include <algorithm>

namespace deltacast {

Status StagingArea::size_slices(Transfer& t, uint32_t slice_bytes) {
  if (slice_bytes < options_.min_slice_bytes || slice_bytes > options_.max_slice_bytes) {
    return corrupt("slice size {} outside [{}, {}]", slice_bytes, options_.min_slice_bytes, options_.max_slice_bytes);
  }
  const uint64_t slices = (t.bytes + slice_bytes - 1) / slice_bytes;
  if (slices > UINT32_MAX) return corrupt("{} bytes in {}-byte slices is too many slices", t.bytes, slice_bytes);
  t.slice_bytes = slice_bytes;
  t.slices = static_cast<uint32_t>(slices);
  t.state.reset(new std::atomic<uint8_t>[t.slices]);
  for (uint32_t i = 0; i < t.slices; ++i) t.state[i].store(kMissing, std::memory_order_relaxed);
  if (options_.record_arrival_times) t.arrival.assign(t.slices, TimePoint{});
  t.arrived_checksum.assign(t.slices, 0);
  return Status();
}

Status StagingArea::expect(uint64_t transfer, uint64_t bytes, uint32_t slice_bytes, uint8_t* memory,
                           std::shared_ptr<void> keep) {
  auto t = std::make_shared<Transfer>();
  t->keep = std::move(keep);
  t->bytes = bytes;
  t->started = SteadyClock::now();
  if (memory != nullptr) {
    t->memory = memory;
  } else {
    t->owned = AlignedBuffer(bytes);
    t->memory = t->owned.data();
  }
  if (slice_bytes != 0) DC_RETURN_IF_ERROR(size_slices(*t, slice_bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  if (transfers_.count(transfer)) return failed_precondition("transfer {} is already expected", transfer);
  transfers_[transfer] = std::move(t);
  announced_cv_.notify_all();
  return Status();
}

Result<std::shared_ptr<StagingArea::Transfer>> StagingArea::find_or_accept(const SliceRef& slice) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = transfers_.find(slice.transfer);
  const auto forgotten = [&] {
    return std::find(forgotten_.begin(), forgotten_.end(), slice.transfer) != forgotten_.end();
  };
  if (it == transfers_.end() && options_.auto_accept_bytes == 0 && options_.announce_wait.count() > 0 && !forgotten()) {
    announced_cv_.wait_for(lock, options_.announce_wait,
                           [&] { return transfers_.count(slice.transfer) != 0 || forgotten(); });
    it = transfers_.find(slice.transfer);
  }
  if (it == transfers_.end() && forgotten()) return std::shared_ptr<Transfer>();
  if (it == transfers_.end()) {
    if (options_.auto_accept_bytes == 0) return corrupt("slice for unknown transfer {}", slice.transfer);
    if (slice.transfer_bytes > options_.auto_accept_bytes) {
      return corrupt("transfer {} of {} bytes exceeds the {} bytes this receiver accepts", slice.transfer,
                     slice.transfer_bytes, options_.auto_accept_bytes);
    }
    auto t = std::make_shared<Transfer>();
    t->bytes = slice.transfer_bytes;
    t->started = SteadyClock::now();
    t->owned = AlignedBuffer(t->bytes);
    t->memory = t->owned.data();
    it = transfers_.emplace(slice.transfer, std::move(t)).first;
  }
  Transfer& t = *it->second;
  if (slice.transfer_bytes != t.bytes) {
    return corrupt("slice says transfer {} has {} bytes, it has {}", slice.transfer, slice.transfer_bytes, t.bytes);
  }
  if (t.slices > 0 || t.bytes == 0) {
    if (slice.slice_bytes != t.slice_bytes) {
      return corrupt("slice size {} does not match transfer {}'s {}", slice.slice_bytes, slice.transfer, t.slice_bytes);
    }
    return it->second;
  }
  // The first slice fixes the slice size, but only once everything else in it checks out: a
  // malformed header must not decide the layout for the slices that follow.
  if (slice.slice_bytes < options_.min_slice_bytes || slice.slice_bytes > options_.max_slice_bytes) {
    return corrupt("slice size {} outside [{}, {}]", slice.slice_bytes, options_.min_slice_bytes, options_.max_slice_bytes);
  }
  const uint64_t slices = (t.bytes + slice.slice_bytes - 1) / slice.slice_bytes;
  const uint64_t offset = static_cast<uint64_t>(slice.index) * slice.slice_bytes;
  if (slice.index >= slices || slice.length != std::min<uint64_t>(slice.slice_bytes, t.bytes - offset)) {
    return corrupt("slice {} of {} bytes does not fit transfer {} in {}-byte slices", slice.index, slice.length,
                   slice.transfer, slice.slice_bytes);
  }
  DC_RETURN_IF_ERROR(size_slices(t, slice.slice_bytes));
  return it->second;
}

Result<Landing> StagingArea::begin(const SliceRef& slice, CancelReceive cancel) {
  DC_ASSIGN_OR_RETURN(std::shared_ptr<Transfer> t, find_or_accept(slice));
  if (!t) return Landing{};  // a late slice of a forgotten transfer: read, discard, refuse
  if (slice.index >= t->slices) return corrupt("slice {} of a {}-slice transfer", slice.index, t->slices);
  const uint64_t offset = slice.offset();
  const uint64_t expected = std::min<uint64_t>(t->slice_bytes, t->bytes - offset);
  if (slice.length != expected) return corrupt("slice {} is {} bytes, it should be {}", slice.index, slice.length, expected);
  std::unique_lock<std::mutex> lock(t->mu);
  const uint8_t state = t->state[slice.index].load();
  const TimePoint now = SteadyClock::now();
  if (state == kArrived) return Landing{nullptr, t, 0};  // a duplicate
  if (state == kReceiving) {
    Owner& owner = t->receiving[slice.index];
    if (now - owner.since < options_.takeover_after) return Landing{nullptr, t, 0};  // the first copy is still coming
    // The first copy stalled (its path likely died mid-slice): it is aborted, and this copy takes
    // the slot once the aborted one has stopped writing into it.
    const uint64_t stalled = owner.generation;
    if (owner.cancel) owner.cancel();
    const bool released = t->released.wait_for(lock, options_.takeover_wait, [&] {
      auto it = t->receiving.find(slice.index);
      return it == t->receiving.end() || it->second.generation != stalled;
    });
    if (!released || t->state[slice.index].load() != kMissing) return Landing{nullptr, t, 0};
  }
  t->state[slice.index].store(kReceiving);
  Owner& owner = t->receiving[slice.index];
  owner = Owner{t->next_generation++, SteadyClock::now(), std::move(cancel)};
  return Landing{t->memory + offset, t, owner.generation};
}

bool StagingArea::complete(const SliceRef& slice, const Landing& landing, bool verified) {
  auto* t = static_cast<Transfer*>(landing.hold.get());  // set by begin(): the transfer stays alive even if forgotten
  if (t == nullptr) return false;
  bool arrived_now = false;
  {
    std::lock_guard<std::mutex> lock(t->mu);
    auto owner = t->receiving.find(slice.index);
    const bool owns = landing.bytes != nullptr && owner != t->receiving.end() && owner->second.generation == landing.generation;
    if (!owns) {
      // A duplicate, or a copy superseded by a newer one: acknowledged only once the slice is in place.
      t->duplicates.fetch_add(1, std::memory_order_relaxed);
      return t->state[slice.index].load() == kArrived;
    }
    t->receiving.erase(owner);
    t->released.notify_all();
    if (!verified) {
      t->rejected.fetch_add(1, std::memory_order_relaxed);
      t->state[slice.index].store(kMissing);  // a resend may land again
      return false;
    }
    if (!t->arrival.empty()) t->arrival[slice.index] = SteadyClock::now();
    t->arrived_checksum[slice.index] = slice.checksum;
    t->state[slice.index].store(kArrived);
    arrived_now = true;
  }
  const uint32_t arrived = t->arrived.fetch_add(1) + 1;
  if (arrived_now && on_slice_) on_slice_(slice);
  if (arrived == t->slices) {
    std::lock_guard<std::mutex> lock(mutex_);
    arrived_cv_.notify_all();
  }
  return true;
}

bool StagingArea::complete(uint64_t transfer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = transfers_.find(transfer);
  return it != transfers_.end() && it->second->arrived.load() == it->second->slices &&
         (it->second->slices > 0 || it->second->bytes == 0);
}

Status StagingArea::wait(uint64_t transfer, Millis timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool done = arrived_cv_.wait_for(lock, timeout, [&] {
    auto it = transfers_.find(transfer);
    return it != transfers_.end() && (it->second->bytes == 0 || (it->second->slices > 0 && it->second->arrived.load() == it->second->slices));
  });
  if (done) return Status();
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) return deadline_exceeded("transfer {} never started within {} ms", transfer, timeout.count());
  return deadline_exceeded("transfer {}: {} of {} slices arrived within {} ms", transfer, it->second->arrived.load(),
                           it->second->slices, timeout.count());
}

Result<uint64_t> StagingArea::wait_any(Millis timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t found = 0;
  const bool done = arrived_cv_.wait_for(lock, timeout, [&] {
    for (const auto& [id, t] : transfers_) {
      if (t->slices > 0 && t->arrived.load() == t->slices) {
        found = id;
        return true;
      }
    }
    return false;
  });
  if (!done) return deadline_exceeded("no transfer completed within {} ms", timeout.count());
  return found;
}

std::span<const uint8_t> StagingArea::bytes(uint64_t transfer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) return {};
  return {it->second->memory, it->second->bytes};
}

TransferProgress StagingArea::progress(uint64_t transfer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TransferProgress p;
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) return p;
  const Transfer& t = *it->second;
  p.bytes = t.bytes;
  p.slice_bytes = t.slice_bytes;
  p.slices = t.slices;
  p.arrived = t.arrived.load();
  p.duplicates = t.duplicates.load();
  p.rejected = t.rejected.load();
  p.started = t.started;
  p.arrival = t.arrival;
  return p;
}

std::vector<uint8_t> StagingArea::present(uint64_t transfer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) return {};
  std::vector<uint8_t> out(it->second->slices);
  for (uint32_t i = 0; i < it->second->slices; ++i) out[i] = it->second->state[i].load() == kArrived;
  return out;
}

Result<uint64_t> StagingArea::digest(uint64_t transfer) const {
  std::shared_ptr<Transfer> t;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = transfers_.find(transfer);
    if (it == transfers_.end()) return not_found("transfer {} is not staged", transfer);
    t = it->second;
  }
  if (t->arrived.load() != t->slices) {
    return failed_precondition("transfer {}: {} of {} slices arrived", transfer, t->arrived.load(), t->slices);
  }
  std::lock_guard<std::mutex> lock(t->mu);  // arrived_checksum is written under it
  return transfer_digest(t->arrived_checksum, t->bytes);
}

void StagingArea::forget(uint64_t transfer) {
  constexpr size_t kForgottenKept = 64;
  std::lock_guard<std::mutex> lock(mutex_);
  transfers_.erase(transfer);
  forgotten_.push_back(transfer);
  if (forgotten_.size() > kForgottenKept) forgotten_.pop_front();
  announced_cv_.notify_all();
}

}  // namespace deltacast
