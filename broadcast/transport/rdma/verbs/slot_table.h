// The sender's bookkeeping of its offer slots on one RDMA connection. The
// receiver takes a fixed number of offers in flight per connection; each
// slice offered takes a free slot, and an immediate names the slot and a
// per-slot sequence number. The receiver's replies (the grant and the final
// answer) echo the immediate: only an echo of the slot's current sequence
// concerns a slice, so a late or forged reply can never grant or complete the
// next slice offered from the same slot. Not thread-safe: one connection thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace deltacast::verbs {

class SlotTable {
 public:
  // At most 65536 slots: the immediate carries the slot in 16 bits.
  explicit SlotTable(uint32_t slots);

  static uint32_t immediate(uint32_t slot, uint16_t sequence) { return (uint32_t{sequence} << 16) | slot; }
  static uint32_t slot_of(uint32_t imm) { return imm & 0xffffu; }
  static uint16_t sequence_of(uint32_t imm) { return static_cast<uint16_t>(imm >> 16); }

  // Takes a free slot for `record`; returns the immediate to write with, or
  // nothing when every slot is in flight.
  std::optional<uint32_t> acquire(uint64_t record);
  // The record in flight in the slot `imm` names, at that sequence (the slot stays taken).
  std::optional<uint64_t> find(uint32_t imm) const;
  // An acknowledgement arrived: the record it completes, freeing its slot, or
  // nothing when the immediate names no slot in flight at that sequence.
  std::optional<uint64_t> release(uint32_t imm);
  // The connection is gone: every record still in flight, each once.
  std::vector<uint64_t> release_all();

  uint32_t slots() const { return static_cast<uint32_t>(entries_.size()); }
  uint32_t in_flight() const { return in_flight_; }
  bool full() const { return in_flight_ == entries_.size(); }

 private:
  struct Entry {
    bool busy = false;
    uint16_t sequence = 0;
    uint64_t record = 0;
  };
  std::vector<Entry> entries_;
  uint32_t in_flight_ = 0;
  uint32_t next_ = 0;  // where the search for a free slot starts: slots are used in turn
};

}  // namespace deltacast::verbs
