// The sender's slot bookkeeping: a reply concerns a slice only when it names
// the slot's current sequence, and the final one completes it exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "broadcast/transport/rdma/verbs/slot_table.h"

namespace deltacast::verbs {
namespace {

TEST(SlotTable, SlotsAreLentUntilNoneIsFreeAndEachAckFreesItsOwn) {
  SlotTable table(4);
  std::vector<uint32_t> imms;
  for (uint64_t r = 10; r < 14; ++r) imms.push_back(*table.acquire(r));
  EXPECT_TRUE(table.full());
  EXPECT_FALSE(table.acquire(99).has_value());
  std::set<uint32_t> slots;
  for (uint32_t imm : imms) slots.insert(SlotTable::slot_of(imm));
  EXPECT_EQ(slots.size(), 4u) << "four slices in flight hold four different slots";
  EXPECT_EQ(table.release(imms[2]), 12u);
  EXPECT_EQ(table.in_flight(), 3u);
  const uint32_t again = *table.acquire(20);
  EXPECT_EQ(SlotTable::slot_of(again), SlotTable::slot_of(imms[2]));
  EXPECT_NE(again, imms[2]) << "the slot's next use carries a new sequence";
}

TEST(SlotTable, StaleDuplicateAndOutOfRangeAcknowledgementsCompleteNothing) {
  SlotTable table(2);
  const uint32_t first = *table.acquire(1);
  EXPECT_EQ(table.release(first), 1u);
  EXPECT_FALSE(table.release(first).has_value()) << "a duplicate acknowledgement";
  const uint32_t second = *table.acquire(2);
  const uint32_t reuse = *table.acquire(3);
  ASSERT_TRUE(SlotTable::slot_of(reuse) == SlotTable::slot_of(first) ||
              SlotTable::slot_of(second) == SlotTable::slot_of(first));
  EXPECT_FALSE(table.release(first).has_value()) << "a late acknowledgement of the slot's previous use";
  EXPECT_FALSE(table.release(SlotTable::immediate(7, 1)).has_value()) << "a slot this connection does not have";
  EXPECT_EQ(table.in_flight(), 2u);
}

TEST(SlotTable, FindingARecordKeepsItsSlotAndOnlyItsCurrentSequenceFindsIt) {
  SlotTable table(2);
  const uint32_t imm = *table.acquire(5);
  EXPECT_EQ(table.find(imm), 5u) << "a grant names the record in flight";
  EXPECT_EQ(table.find(imm), 5u) << "and leaves the slot taken";
  EXPECT_EQ(table.in_flight(), 1u);
  EXPECT_FALSE(table.find(imm + (1u << 16)).has_value()) << "another sequence of the same slot";
  EXPECT_FALSE(table.find(SlotTable::immediate(9, 1)).has_value()) << "a slot this connection does not have";
  EXPECT_EQ(table.release(imm), 5u);
  EXPECT_FALSE(table.find(imm).has_value()) << "a reply after the final one";
}

TEST(SlotTable, ALostConnectionReturnsEveryRecordInFlightOnce) {
  SlotTable table(8);
  for (uint64_t r = 0; r < 5; ++r) (void)table.acquire(r);
  (void)table.release(*table.acquire(100));
  auto records = table.release_all();
  std::sort(records.begin(), records.end());
  EXPECT_EQ(records, (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(table.release_all().empty());
  EXPECT_EQ(table.in_flight(), 0u);
}

TEST(SlotTable, SequencesWrapWithoutConfusingUses) {
  SlotTable table(1);
  uint32_t previous = *table.acquire(0);
  ASSERT_TRUE(table.release(previous).has_value());
  for (uint64_t r = 1; r < 70000; ++r) {  // past 2^16 uses of the one slot
    const uint32_t imm = *table.acquire(r);
    ASSERT_NE(imm, previous);
    ASSERT_FALSE(table.release(previous).has_value());
    ASSERT_EQ(table.release(imm), r);
    previous = imm;
  }
}

}  // namespace
}  // namespace deltacast::verbs
