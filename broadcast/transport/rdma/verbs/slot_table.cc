#include "broadcast/transport/rdma/verbs/slot_table.h"

#include <algorithm>

namespace deltacast::verbs {

SlotTable::SlotTable(uint32_t slots) : entries_(std::clamp<uint32_t>(slots, 1, 1u << 16)) {}

std::optional<uint32_t> SlotTable::acquire(uint64_t record) {
  if (full()) return std::nullopt;
  const uint32_t n = slots();
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t slot = (next_ + k) % n;
    Entry& e = entries_[slot];
    if (e.busy) continue;
    e.busy = true;
    e.record = record;
    ++e.sequence;
    ++in_flight_;
    next_ = (slot + 1) % n;
    return immediate(slot, e.sequence);
  }
  return std::nullopt;
}

std::optional<uint64_t> SlotTable::find(uint32_t imm) const {
  const uint32_t slot = slot_of(imm);
  if (slot >= slots()) return std::nullopt;
  const Entry& e = entries_[slot];
  if (!e.busy || e.sequence != sequence_of(imm)) return std::nullopt;
  return e.record;
}

std::optional<uint64_t> SlotTable::release(uint32_t imm) {
  const auto record = find(imm);
  if (!record) return std::nullopt;
  Entry& e = entries_[slot_of(imm)];
  e.busy = false;
  --in_flight_;
  return record;
}

std::vector<uint64_t> SlotTable::release_all() {
  std::vector<uint64_t> records;
  for (Entry& e : entries_) {
    if (!e.busy) continue;
    e.busy = false;
    records.push_back(e.record);
  }
  in_flight_ = 0;
  return records;
}

}  // namespace deltacast::verbs
