// The receiver's staging: memory that slices land in, at their offsets, and
// the arrival state of every slice (missing, being received, arrived), so a
// slice counts exactly once however many rails deliver it. Every slice header
// that reaches begin() came from the network and is checked against the
// transfer it names before any byte is written.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "broadcast/transport/rail_health.h"
#include "broadcast/transport/transport.h"
#include "core/aligned_buffer.h"

namespace deltacast {

struct StagingOptions {
  // Transfers not announced with expect() are accepted up to this size
  // (memory allocated here); 0 accepts only expected transfers.
  uint64_t auto_accept_bytes = 0;
  uint32_t min_slice_bytes = 1024;
  uint32_t max_slice_bytes = 64 << 20;
  bool record_arrival_times = false;
  // A copy of a slice that arrives while another copy has been receiving for
  // longer than this supersedes it (the sender only sends a second copy when
  // the first missed its deadline: that first copy's path is likely dead).
  Millis takeover_after{15};
  // A superseded copy is aborted, and the new one waits up to this long for it
  // to stop writing into the slot (two writers in one slot could leave it
  // holding bytes other than the verified ones); past it the new copy is
  // refused and the sender sends again.
  Millis takeover_wait{500};
  // A slice may arrive before its transfer is announced (data and control
  // travel separately): its receive waits this long for expect() before the
  // slice is refused. Transfers already forgotten are refused at once.
  Millis announce_wait{0};
};

struct TransferProgress {
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;  // 0 until the first slice told it
  uint32_t slices = 0;
  uint32_t arrived = 0;
  uint64_t duplicates = 0;
  uint64_t rejected = 0;     // payloads that failed their checksum
  TimePoint started{};
  std::vector<TimePoint> arrival;  // per slice, when recording
};

class StagingArea : public SliceSink {
 public:
  explicit StagingArea(StagingOptions options = {}) : options_(options) {}

  // Announces a transfer; its bytes land in `memory` (bytes long, owned by the
  // caller) or in memory allocated here. slice_bytes 0: the sender chooses,
  // and its first slice fixes it. `keep` holds the caller's memory alive for
  // as long as a receive into it may still be running, even after forget().
  Status expect(uint64_t transfer, uint64_t bytes, uint32_t slice_bytes = 0, uint8_t* memory = nullptr,
                std::shared_ptr<void> keep = nullptr);

  // Waits until every slice arrived.
  Status wait(uint64_t transfer, Millis timeout);
  // Waits until any transfer is fully received; returns its id.
  Result<uint64_t> wait_any(Millis timeout);
  bool complete(uint64_t transfer) const;
  std::span<const uint8_t> bytes(uint64_t transfer) const;
  TransferProgress progress(uint64_t transfer) const;
  // Which slices of a transfer have arrived (empty if unknown).
  std::vector<uint8_t> present(uint64_t transfer) const;
  // The transfer's digest (transfer.h) from the checksums its slices were
  // verified against on arrival: no pass over the bytes. Every slice must have arrived.
  Result<uint64_t> digest(uint64_t transfer) const;
  void forget(uint64_t transfer);

  // Runs after each slice that arrives (from the backend's thread).
  void set_on_slice(std::function<void(const SliceRef&)> fn) { on_slice_ = std::move(fn); }

  // SliceSink
  Result<Landing> begin(const SliceRef& slice, CancelReceive cancel) override;
  bool complete(const SliceRef& slice, const Landing& landing, bool verified) override;

 private:
  enum SliceState : uint8_t { kMissing = 0, kReceiving = 1, kArrived = 2 };
  // Who is receiving a slot: a generation (so a superseded copy's completion is ignored),
  // when it started, and how to abort it.
  struct Owner {
    uint64_t generation = 0;
    TimePoint since{};
    CancelReceive cancel;
  };
  struct Transfer {
    std::mutex mu;  // slot ownership
    std::condition_variable released;  // a receiving copy finished (well or not)
    std::map<uint32_t, Owner> receiving;
    uint64_t next_generation = 1;
    uint64_t bytes = 0;
    uint32_t slice_bytes = 0;
    uint32_t slices = 0;
    uint8_t* memory = nullptr;
    AlignedBuffer owned;
    std::shared_ptr<void> keep;  // the caller's memory, while receives may touch it
    std::unique_ptr<std::atomic<uint8_t>[]> state;
    std::atomic<uint32_t> arrived{0};
    std::atomic<uint64_t> duplicates{0};
    std::atomic<uint64_t> rejected{0};
    TimePoint started{};
    std::vector<TimePoint> arrival;
    std::vector<uint64_t> arrived_checksum;  // per slice, as verified on arrival
  };

  Status size_slices(Transfer& t, uint32_t slice_bytes);
  Result<std::shared_ptr<Transfer>> find_or_accept(const SliceRef& slice);

  StagingOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_cv_;
  std::condition_variable announced_cv_;
  std::deque<uint64_t> forgotten_;  // recently forgotten transfers, newest last
  std::map<uint64_t, std::shared_ptr<Transfer>> transfers_;  // shared: slices being received hold theirs
  std::function<void(const SliceRef&)> on_slice_;
};

}  // namespace deltacast
